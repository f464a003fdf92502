/**
 * A network added as one row of the network table (payments/networkTable.ts): Polygon Amoy, off by
 * default, is enabled by NETWORKS, configured by its own RPC_URL_ and USDC_ADDRESS_ variables,
 * listed by /config (in the document's terms), and offered and signed for with its own chain id and
 * EIP-712 domain, by the EVM family, without a line of code of its own.
 */
import { getAddress, hashTypedData, recoverTypedDataAddress, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChains } from '../../payments/chains/index';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';
import { loadConfig } from '../../payments/config';
import { NETWORK_TABLE } from '../../payments/networkTable';
import { chooseRequirement } from '../../payments/x402/choose';
import { decodePaymentHeader } from '../../payments/x402/headers';
import { relayOffer } from '../support/chains';
import { ifStarted } from '../support/teardown';
import { startTestService, type TestService } from '../support/service';

const AMOY_USDC = '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582';
const KEY: Hex = '0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318';

let t: TestService;
beforeAll(async () => {
  t = await startTestService({ NETWORKS: 'base-sepolia,polygon-amoy', RPC_URL_POLYGON_AMOY: 'http://127.0.0.1:9' });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

describe('Polygon Amoy, one row of the network table', () => {
  it('is off by default and enabled by NETWORKS, with its public RPC and USDC unless configured', () => {
    expect(loadConfig({}).networks.map((network) => network.name)).not.toContain('polygon-amoy');
    expect(loadConfig({ NETWORKS: 'polygon-amoy' }).networks).toEqual([
      { name: 'polygon-amoy', rpcUrl: 'https://rpc-amoy.polygon.technology', usdc: AMOY_USDC },
    ]);
    const other = '0x1111111111111111111111111111111111111111';
    expect(
      loadConfig({
        NETWORKS: 'polygon-amoy',
        RPC_URL_POLYGON_AMOY: 'https://amoy.example.org',
        USDC_ADDRESS_POLYGON_AMOY: other,
      }).networks,
    ).toEqual([{ name: 'polygon-amoy', rpcUrl: 'https://amoy.example.org', usdc: other }]);
    expect(() => loadConfig({ NETWORKS: 'polygon-amoy', USDC_ADDRESS_POLYGON_AMOY: 'not-an-address' })).toThrow(
      /USDC_ADDRESS_POLYGON_AMOY/,
    );
  });

  it('is listed by /config with its family, chain id, USDC and names', async () => {
    const res = await t.client.get('/config');
    expect(res.status).toBe(200);
    expect(res.body.networks.enabled).toEqual(['base-sepolia', 'polygon-amoy']);
    expect(res.body.networks.evm).toEqual(['base-sepolia', 'polygon-amoy']);
    expect(res.body.networks.solana).toEqual([]);
    expect(res.body.networks.v1).toContain('polygon-amoy');
    expect(res.body.networks.v2).toContain('eip155:80002');
    expect(res.body.networks.configs['polygon-amoy']).toEqual({
      chainType: 'evm',
      chainId: 80002,
      usdc: AMOY_USDC,
      rpcHost: '127.0.0.1:9',
      finality: { head: 'finalized', watchSeconds: 1800 },
    });
  });

  it('is offered, chosen and signed for with its chain id and EIP-712 domain', async () => {
    const config = loadConfig({
      NETWORKS: 'polygon-amoy',
      EVM_PRIVATE_KEY: KEY,
      RPC_URL_POLYGON_AMOY: 'http://127.0.0.1:9',
    });
    const chains = await createChains(config);
    const offer = await relayOffer(chains, 'polygon-amoy', {
      amountMicroUsdc: 10_300n,
      resource: 'http://127.0.0.1/relay',
    });
    expect(offer).toMatchObject({
      network: 'polygon-amoy',
      asset: AMOY_USDC,
      payTo: privateKeyToAccount(KEY).address,
      maxAmountRequired: '10300',
      extra: { name: 'USDC', version: '2' },
    });

    const choice = chooseRequirement([offer], {
      networks: chains.payingNetworks(),
      maxAmountMicroUsdc: 1_000_000n,
      schemes: PAYMENT_SCHEMES,
    });
    if (!choice.ok) throw new Error(choice.details);
    const signed = await chains.createPayment(choice.value, { now: new Date() });
    if (!signed.ok) throw new Error(signed.details);
    const decoded = decodePaymentHeader(signed.value.header, PAYMENT_SCHEMES);
    if (!decoded.ok) throw new Error(decoded.details);
    const { authorization, signature } = decoded.value.payload as {
      authorization: Record<'from' | 'to' | 'value' | 'validAfter' | 'validBefore' | 'nonce', string>;
      signature: Hex;
    };
    const typedData = {
      domain: { name: 'USDC', version: '2', chainId: 80002, verifyingContract: getAddress(AMOY_USDC) },
      types: {
        TransferWithAuthorization: [
          { name: 'from', type: 'address' },
          { name: 'to', type: 'address' },
          { name: 'value', type: 'uint256' },
          { name: 'validAfter', type: 'uint256' },
          { name: 'validBefore', type: 'uint256' },
          { name: 'nonce', type: 'bytes32' },
        ],
      },
      primaryType: 'TransferWithAuthorization',
      message: {
        from: authorization.from as Hex,
        to: authorization.to as Hex,
        value: BigInt(authorization.value),
        validAfter: BigInt(authorization.validAfter),
        validBefore: BigInt(authorization.validBefore),
        nonce: authorization.nonce as Hex,
      },
    } as const;
    expect(hashTypedData(typedData)).toMatch(/^0x/);
    expect(await recoverTypedDataAddress({ ...typedData, signature })).toBe(privateKeyToAccount(KEY).address);
    expect(NETWORK_TABLE['polygon-amoy']).toMatchObject({ chainType: 'evm', decimals: 6, transferMethod: 'eip3009' });
  });
});
