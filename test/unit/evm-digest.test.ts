// The EIP-712 digest of TransferWithAuthorization computed directly (payments/chains/evm/digest.ts)
// is viem's hashTypedData, and our signature of it is the one viem's signTypedData makes.
import { randomBytes } from 'node:crypto';
import { getAddress, hashTypedData, toHex, type Address } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { transferWithAuthorizationTypes, type TransferAuthorization } from '../../payments/chains/evm';
import { transferAuthorizationDigest, type AuthorizationDomain } from '../../payments/chains/evm/digest';

const randomAddress = (): Address => getAddress(toHex(randomBytes(20)));
const randomWord = (bytes: number): bigint => BigInt(toHex(randomBytes(bytes)));

function randomAuthorization(): TransferAuthorization {
  return {
    from: randomAddress(),
    to: randomAddress(),
    value: randomWord(1 + (randomBytes(1)[0]! % 32)),
    validAfter: randomWord(4),
    validBefore: randomWord(8),
    nonce: toHex(randomBytes(32)),
  };
}

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
});
