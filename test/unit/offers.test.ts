import { describe, expect, it } from 'vitest';
import { settleableOffers, type OffersRequest } from '../../payments/incoming/offer';
import type { ChainNetwork, Chains } from '../../payments/chains/index';
import { canonicalNetwork } from '../../payments/basics/networkTable';
import { DEFAULT_NETWORK_NAMES, NETWORK_TABLE } from '../../payments/basics/networkTable';

/** Our offers as the relay's quote and chat make them, without a facilitator (nothing is fetched). */
const buildOffers = (chains: Chains, request: OffersRequest) => settleableOffers(chains, request, undefined);

const EVM_ADDRESS = '0x1111111111111111111111111111111111111111';
const SOLANA_ADDRESS = '7BvGgLdfp1AxHovSHamAuPKqZ1GQ8TCWRRYCPcTFSHcb';

function networks(withSolanaKey = true): ChainNetwork[] {
  return DEFAULT_NETWORK_NAMES.map((name) => {
    const entry = NETWORK_TABLE[name];
    return {
      name,
      chainType: entry.chainType,
      networkClass: entry.networkClass,
      chainId: entry.chainId,
      usdc: entry.usdc,
      rpcUrl: 'http://127.0.0.1:1',
      serviceAddress: entry.chainType === 'evm' ? EVM_ADDRESS : withSolanaKey ? SOLANA_ADDRESS : undefined,
    };
  });
}

function chains(list: ChainNetwork[]): Chains {
  return {
    networks: list,
    network: (name: string) => list.find((network) => network.name === canonicalNetwork(name)),
  } as unknown as Chains;
}

const base: OffersRequest = {
  amountMicroUsdc: 10_300n,
  networkClass: 'testnet',
  resource: 'http://127.0.0.1:3000/relay',
  description: 'relay',
  mimeType: 'application/json',
  maxTimeoutSeconds: 300,
};

describe('our 402 offers', () => {
  it('offers every network of the class, the preferred one first, with its asset, payTo and extra', async () => {
    const offers = await buildOffers(chains(networks()), { ...base, preferredNetwork: 'solana-devnet' });
    expect(offers.map((offer) => offer.network)).toEqual(['solana-devnet', 'base-sepolia', 'skale-base-sepolia']);
    expect(offers[0]).toMatchObject({
      payTo: SOLANA_ADDRESS,
      asset: NETWORK_TABLE['solana-devnet'].usdc,
      extra: { feePayer: SOLANA_ADDRESS },
      maxAmountRequired: '10300',
      scheme: 'exact',
    });
    expect(offers[1]).toMatchObject({
      payTo: EVM_ADDRESS,
      asset: NETWORK_TABLE['base-sepolia'].usdc,
      extra: { name: 'USDC', version: '2' },
    });
    expect(offers[2]!.extra).toEqual({ name: 'Bridged USDC (SKALE Bridge)', version: '2' });
  });

  it('leaves out networks standard clients do not know unless named, and networks without a wallet', async () => {
    const mainnet = await buildOffers(chains(networks(false)), { ...base, networkClass: 'mainnet' });
    expect(mainnet.map((offer) => offer.network)).toEqual(['base']);
    const named = await buildOffers(chains(networks()), {
      ...base,
      networkClass: 'testnet',
      namedNetwork: 'skale-base',
    });
    expect(named.map((offer) => offer.network)).toEqual(['skale-base']);
    expect(named[0]!.extra).toEqual({ name: 'Bridged USDC (SKALE Bridge)', version: '2' });
    expect(await buildOffers(chains(networks(false)), { ...base, namedNetwork: 'solana' })).toEqual([]);
  });

  it('refuses a price of zero', async () => {
    await expect(buildOffers(chains(networks()), { ...base, amountMicroUsdc: 0n })).rejects.toThrow(RangeError);
  });
});
