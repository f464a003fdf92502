// The EIP-712 digest of TransferWithAuthorization computed directly (payments/chains/evm/digest.ts)
// is viem's hashTypedData, and our signature of it is the one viem's signTypedData makes. A client's
// payment on every EVM network of the table, sent as X-PAYMENT or as PAYMENT-SIGNATURE, decodes to
// the authorization the client signed, whose digest is hashTypedData's and whose signer is recovered.
import { randomBytes } from 'node:crypto';
import { hashTypedData, recoverTypedDataAddress, toHex, type Address } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { usdcDomain } from '../../payments/chains/evm/authorization';
import { authorizationOf } from '../../payments/chains/evm/verify';
import {
  transferAuthorizationDigest,
  transferAuthorizationDigestBytes,
  type AuthorizationDomain,
} from '../../payments/chains/evm/digest';
import { decodeClientPayment, paymentForOffers } from '../../payments/incoming/clientPayment';
import { NETWORK_TABLE, type NetworkName } from '../../payments/basics/networkTable';
import { recoverSignerLowercase } from '../../payments/basics/secp256k1';
import type { PaymentRequirements } from '../../payments/x402/types';
import { requirementsToV2 } from '../../payments/x402/v2';
import { randomAddress, randomAuthorization, randomWord } from '../support/random-authorization';

const DOMAINS: AuthorizationDomain[] = [
  { name: 'USDC', version: '2', chainId: 84532, verifyingContract: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' },
  { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' },
  { name: 'Ünïcode coin ✓', version: '10.1', chainId: 1, verifyingContract: randomAddress() },
];

describe('the TransferWithAuthorization digest', () => {
  it('is hashTypedData of the same domain and message, over 300 random authorizations', () => {
    for (let index = 0; index < 300; index += 1) {
      const domain = DOMAINS[index % DOMAINS.length]!;
      const authorization = randomAuthorization();
      expect(transferAuthorizationDigest(domain, authorization)).toBe(
        hashTypedData({
          domain,
          types: transferWithAuthorizationTypes,
          primaryType: 'TransferWithAuthorization',
          message: authorization,
        }),
      );
    }
  });

  it('gives the signature signTypedData gives', async () => {
    const account = privateKeyToAccount(toHex(randomBytes(32)));
    const domain = DOMAINS[0]!;
    const authorization = { ...randomAuthorization(), from: account.address };
    const typed = await account.signTypedData({
      domain,
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: authorization,
    });
    expect(await account.sign({ hash: transferAuthorizationDigest(domain, authorization) })).toBe(typed);
  });

  it('refuses values that are not what the types say', () => {
    const domain = DOMAINS[0]!;
    const authorization = randomAuthorization();
    expect(() => transferAuthorizationDigest(domain, { ...authorization, value: -1n })).toThrow(RangeError);
    expect(() => transferAuthorizationDigest(domain, { ...authorization, validBefore: 1n << 256n })).toThrow(
      RangeError,
    );
    expect(() => transferAuthorizationDigest(domain, { ...authorization, nonce: '0x1234' })).toThrow(RangeError);
    expect(() => transferAuthorizationDigest(domain, { ...authorization, to: '0x12' })).toThrow(RangeError);
  });

  it('is hashTypedData of what a client signed, on every EVM network, sent in either version, and recovers the client', async () => {
    const networks = (Object.keys(NETWORK_TABLE) as NetworkName[]).filter(
      (network) => NETWORK_TABLE[network].chainType === 'evm',
    );
    expect(networks.length).toBeGreaterThan(1);
    for (let index = 0; index < 120; index += 1) {
      const network = networks[index % networks.length]!;
      const client = privateKeyToAccount(toHex(randomBytes(32)));
      const offer: PaymentRequirements = {
        scheme: 'exact',
        network,
        maxAmountRequired: randomWord(1 + (index % 8)).toString(),
        resource: 'http://127.0.0.1/relay',
        description: '',
        mimeType: 'application/json',
        payTo: randomAddress(),
        maxTimeoutSeconds: 300,
        asset: NETWORK_TABLE[network].usdc,
        extra: { ...NETWORK_TABLE[network].eip712 },
      };
      const domain = usdcDomain(network, offer);
      const message = { ...randomAuthorization(), from: client.address, to: offer.payTo as Address };
      const signature = await client.signTypedData({
        domain,
        types: transferWithAuthorizationTypes,
        primaryType: 'TransferWithAuthorization',
        message,
      });
      // As clients write it: decimal strings, hex in whatever case they chose.
      const payload = {
        signature: index % 3 === 0 ? `0x${signature.slice(2).toUpperCase()}` : signature,
        authorization: {
          from: index % 2 === 0 ? message.from.toLowerCase() : message.from,
          to: message.to,
          value: message.value.toString(),
          validAfter: message.validAfter.toString(),
          validBefore: message.validBefore.toString(),
          nonce: index % 4 === 0 ? `0x${message.nonce.slice(2).toUpperCase()}` : message.nonce,
        },
      };
      const headers = [
        { version: 1 as const, value: { x402Version: 1, scheme: 'exact', network, payload } },
        { version: 2 as const, value: { x402Version: 2, accepted: requirementsToV2(offer), payload } },
      ];
      const expected = hashTypedData({
        domain,
        types: transferWithAuthorizationTypes,
        primaryType: 'TransferWithAuthorization',
        message,
      });
      for (const { version, value } of headers) {
        const decoded = decodeClientPayment({ version, value: Buffer.from(JSON.stringify(value)).toString('base64') });
        if (!decoded.ok) throw new Error(decoded.details);
        const matched = paymentForOffers(decoded.value, [offer]);
        if (!matched.ok) throw new Error(matched.details);
        const authorization = authorizationOf(matched.value.payment);
        expect(transferAuthorizationDigest(domain, authorization)).toBe(expected);
        const digest = transferAuthorizationDigestBytes(domain, authorization);
        expect(recoverSignerLowercase(digest, authorization.sentSignature)).toBe(client.address.toLowerCase());
      }
      if (index % 20 === 0)
        expect(
          await recoverTypedDataAddress({
            domain,
            types: transferWithAuthorizationTypes,
            primaryType: 'TransferWithAuthorization',
            message,
            signature,
          }),
        ).toBe(client.address);
    }
  });
});
