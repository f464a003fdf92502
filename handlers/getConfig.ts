import type { Handler } from './types';
import type { components } from '../codegen/api';
import { aliasesOf, caip2Of, NETWORK_TABLE, type ChainType, type NetworkName } from '../payments/basics/networkTable';
import { finalityRuleOf, rpcHost } from '../payments/basics/config';
import { relayFeeModelText } from '../payments/accounts/fees';

type ApiNetworkName = components['schemas']['NetworkName'];

/** Every name a network is accepted by, its own name first. */
function namesOf(network: NetworkName): ApiNetworkName[] {
  return [network, ...(aliasesOf(network) as ApiNetworkName[])];
}

export const getConfig: Handler<'getConfig'> = (_ctx, { config, baseUrl }) => {
  const enabled = config.networks.map((network) => network.name);
  const configs = Object.fromEntries(
    config.networks.map((network) => {
      const entry = NETWORK_TABLE[network.name];
      return [
        network.name,
        {
          chainType: entry.chainType,
          ...(entry.chainId === undefined ? {} : { chainId: entry.chainId }),
          usdc: network.usdc,
          rpcHost: rpcHost(network.rpcUrl),
          label: entry.label,
          networkClass: entry.networkClass,
          symbol: entry.symbol,
          decimals: entry.decimals,
          transferMethod: entry.transferMethod,
          finality: finalityRuleOf(config.networks, network.name),
        },
      ];
    }),
  );
  const byFamily: Partial<Record<ChainType, NetworkName[]>> = {};
  for (const name of enabled) (byFamily[NETWORK_TABLE[name].chainType] ??= []).push(name);
  const fees = { percent: config.relayFeePercent, minUsdc: config.relayFeeMinUsdc };
  return Promise.resolve({
    status: 200,
    body: {
      protocol: { versions: ['1', '2'], current: '1' },
      credits: {
        creditsPerUsdc: 1000,
        usdcPerCredit: 0.001,
        description: '1 credit = 1 milli-USDC = 0.001 USDC (1000 credits per USDC)',
      },
      relay: {
        fees: {
          percentage: config.relayFeePercent,
          minUSDC: Number(config.relayFeeMinUsdc),
          model: relayFeeModelText(fees),
        },
        limits: { maxDailyPerWallet: config.relayDailyPerWalletUsd, maxDailyTotal: config.relayDailyTotalUsd },
        timeouts: { asyncThresholdMs: config.asyncThresholdMs },
      },
      networks: {
        enabled,
        // The enabled networks grouped by family, as the table names it.
        evm: byFamily.evm ?? [],
        solana: byFamily.solana ?? [],
        // Clients such as HTTPayer's SDK refuse a network missing here, and may name Solana by any of its names.
        v1: enabled.flatMap(namesOf),
        // x402 version 2 names networks by their CAIP-2 id.
        v2: enabled.map(caip2Of),
        configs,
      },
      assets: { enabled: ['usdc'] },
      server: {
        baseUrl: baseUrl(),
        timeouts: {
          requestMs: config.requestTimeoutMs,
          headersMs: config.headersTimeoutMs,
          keepAliveMs: config.keepAliveTimeoutMs,
        },
      },
    },
  });
};
