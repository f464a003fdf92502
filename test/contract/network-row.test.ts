/**
 * The network table against @x402/evm's own table of default assets and version 1 names, read from
 * the installed package: every EVM network it lists is a row of ours with its chain id, first
 * asset, decimals, EIP-712 domain and transfer method; configuration enables each by its v1 name
 * and by its CAIP-2 id. And a network added as one row of the network table (payments/basics/networkTable.ts): Polygon Amoy, off by
 * default, is enabled by NETWORKS, configured by its own RPC_URL_ and USDC_ADDRESS_ variables,
 * listed by /config (in the document's terms), and offered and signed for with its own chain id and
 * EIP-712 domain, by the EVM family, without a line of code of its own.
 */
import { getAddress, hashTypedData, recoverTypedDataAddress, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { DEFAULT_ASSETS } from '@x402/evm';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { createChains } from '../../payments/chains/index';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';
import { ConfigError, envSuffix, loadConfig } from '../../payments/basics/config';
import {
  aliasesOf,
  canonicalNetwork,
  NETWORK_NAMES,
  NETWORK_TABLE,
  type NetworkName,
} from '../../payments/basics/networkTable';
import { loadDocument } from '../../server/openapi';
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

/** Our row of a CAIP-2 id, by its CAIP-2 id. */
function rowOf(caip2: string) {
  const name = canonicalNetwork(caip2);
  return name === undefined ? undefined : NETWORK_TABLE[name];
}

const V1_NAMES = Object.entries(EVM_NETWORK_CHAIN_ID_MAP) as [string, number][];

describe("the network table against @x402/evm's", () => {
  it('has a row for every network of its default assets, with its first asset as @x402/evm describes it', () => {
    const networks = Object.entries(DEFAULT_ASSETS);
    expect(networks.length).toBeGreaterThanOrEqual(26);
    for (const [caip2, assets] of networks) {
      const [asset] = assets;
      expect(asset, caip2).toBeDefined();
      expect(rowOf(caip2), caip2).toMatchObject({
        chainType: 'evm',
        caip2,
        chainId: Number(caip2.slice('eip155:'.length)),
        usdc: asset!.asset,
        symbol: asset!.symbol,
        decimals: asset!.decimals,
        eip712: { name: asset!.name, version: asset!.version },
        transferMethod: 'assetTransferMethod' in asset! ? asset.assetTransferMethod : 'eip3009',
        enabledByDefault: expect.any(Boolean),
      });
    }
  });

  it('names each by its version 1 name where @x402/evm has one, else by its CAIP-2 id', () => {
    for (const caip2 of Object.keys(DEFAULT_ASSETS)) {
      const v1 = V1_NAMES.find(([, chainId]) => `eip155:${chainId}` === caip2)?.[0];
      expect(rowOf(caip2)?.name, caip2).toBe(v1 ?? caip2);
    }
    // A v1 name of a network we have a row for is that row's name.
    for (const [v1, chainId] of V1_NAMES) {
      const row = rowOf(`eip155:${chainId}`);
      if (row) expect(row.name).toBe(v1);
    }
  });

  it('keeps the new networks off by default, each with a class, a label and an explorer', () => {
    for (const caip2 of Object.keys(DEFAULT_ASSETS)) {
      const row = rowOf(caip2)!;
      if (!['eip155:8453', 'eip155:84532'].includes(caip2)) expect(row.enabledByDefault, caip2).toBe(false);
      expect(['mainnet', 'testnet']).toContain(row.networkClass);
      expect(row.label).not.toBe('');
      expect(row.explorerTxUrl).toMatch(/^https:\/\/[^ ]+\{tx\}$/);
    }
  });
});

describe('NETWORKS', () => {
  /** The variables a network needs beyond NETWORKS: its RPC URL where it has no public one. */
  const rpcOf = (name: NetworkName) =>
    NETWORK_TABLE[name].publicRpcUrl === undefined ? { [`RPC_URL_${envSuffix(name)}`]: 'https://rpc.example.org' } : {};

  it.each(NETWORK_NAMES.map((name) => [name, NETWORK_TABLE[name].caip2] as const))(
    'enables %s by its name and by its CAIP-2 id %s',
    (name, caip2) => {
      for (const listed of [name, caip2]) {
        const [network] = loadConfig({ NETWORKS: listed, ...rpcOf(name) }).networks;
        expect(network).toEqual({
          name,
          rpcUrl: NETWORK_TABLE[name].publicRpcUrl ?? 'https://rpc.example.org',
          // The variable the URL was read from, when one was.
          ...(NETWORK_TABLE[name].publicRpcUrl === undefined ? { rpcVariable: `RPC_URL_${envSuffix(name)}` } : {}),
          usdc: NETWORK_TABLE[name].usdc,
        });
      }
    },
  );

  it('enables every network at once: the count /config can list', () => {
    const rpc = Object.assign({}, ...NETWORK_NAMES.map(rpcOf)) as Record<string, string>;
    const all = loadConfig({ NETWORKS: NETWORK_NAMES.map((name) => NETWORK_TABLE[name].caip2).join(','), ...rpc });
    expect(all.networks.map((network) => network.name)).toEqual(NETWORK_NAMES);
    expect(NETWORK_NAMES.length).toBe(31);
  });

  it('names the variable a network without a public RPC endpoint needs, and reads it', () => {
    expect(NETWORK_TABLE['eip155:723487'].publicRpcUrl).toBeUndefined();
    expect(() => loadConfig({ NETWORKS: 'base,eip155:723487' })).toThrow(ConfigError);
    expect(() => loadConfig({ NETWORKS: 'base,eip155:723487' })).toThrow(
      'RPC_URL_EIP155_723487: is required: NETWORKS enables eip155:723487 (Radius), which has no public RPC endpoint we know of',
    );
    expect(
      loadConfig({
        NETWORKS: 'eip155:42161',
        RPC_URL_EIP155_42161: 'https://arbitrum.example.org',
        USDC_ADDRESS_EIP155_42161: '0x1111111111111111111111111111111111111111',
      }).networks,
    ).toEqual([
      {
        name: 'eip155:42161',
        rpcUrl: 'https://arbitrum.example.org',
        rpcVariable: 'RPC_URL_EIP155_42161',
        usdc: '0x1111111111111111111111111111111111111111',
      },
    ]);
    expect(() => loadConfig({ NETWORKS: 'eip155:42161', RPC_URL_EIP155_42161: 'not a url' })).toThrow(
      /^RPC_URL_EIP155_42161: /,
    );
  });
});

describe("the document's NetworkName", () => {
  it('lists every name, alias and CAIP-2 id the service accepts, and nothing else', () => {
    const document = loadDocument() as unknown as { components: { schemas: { NetworkName: { enum: string[] } } } };
    const accepted = NETWORK_NAMES.flatMap((name) => [name, ...aliasesOf(name), NETWORK_TABLE[name].caip2]);
    expect([...document.components.schemas.NetworkName.enum].sort()).toEqual([...new Set(accepted)].sort());
  });
});

describe('/config with every network enabled', () => {
  it('lists each, by its name and its CAIP-2 id, with its stablecoin, decimals and transfer method', async () => {
    const rpc = Object.fromEntries(NETWORK_NAMES.map((name) => [`RPC_URL_${envSuffix(name)}`, 'http://127.0.0.1:9']));
    const all = await startTestService({ NETWORKS: NETWORK_NAMES.join(','), ...rpc });
    try {
      const res = await all.client.get('/config');
      expect(res.status).toBe(200);
      expect(res.body.networks.enabled).toEqual(NETWORK_NAMES);
      expect(res.body.networks.enabled).toHaveLength(31);
      expect(res.body.networks.v2).toEqual(NETWORK_NAMES.map((name) => NETWORK_TABLE[name].caip2));
      expect(res.body.networks.evm).toHaveLength(29);
      expect(res.body.networks.solana).toEqual(['solana', 'solana-devnet']);
      expect(res.body.networks.configs['eip155:42161']).toEqual({
        chainType: 'evm',
        chainId: 42161,
        usdc: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831',
        rpcHost: '127.0.0.1:9',
        label: 'Arbitrum One',
        networkClass: 'mainnet',
        symbol: 'USDC',
        decimals: 6,
        transferMethod: 'eip3009',
        finality: { head: 'finalized', watchSeconds: 3600 },
      });
      expect(res.body.networks.configs.megaeth).toMatchObject({
        chainId: 4326,
        symbol: 'MegaUSD',
        decimals: 18,
        transferMethod: 'permit2',
      });
    } finally {
      await all.stop();
    }
  });
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
    ).toEqual([
      { name: 'polygon-amoy', rpcUrl: 'https://amoy.example.org', rpcVariable: 'RPC_URL_POLYGON_AMOY', usdc: other },
    ]);
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
      label: 'Polygon Amoy',
      networkClass: 'testnet',
      symbol: 'USDC',
      decimals: 6,
      transferMethod: 'eip3009',
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
      types: transferWithAuthorizationTypes,
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
