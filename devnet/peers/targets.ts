// Starting the x402-protected targets: each route's price, network and payTo settled from the
// target's options over startPeers' defaults, then a USDC account for every payTo on Solana. By
// default one x402 version 1 target per network, named after it, and one version 2 target per
// network the v2 peers serve, named `v2-<network>`.
import type { Address as SolanaAddress } from '@solana/kit';
import {
  EVM_NETWORKS,
  isEvmNetwork,
  isSolanaNetwork,
  type EvmNetworkRow,
  type NetworkName,
  type SolanaNetworkName,
} from '../networks.js';
import { required } from '../required.js';
import type { SolanaLedger } from '../svm/ledger.js';
import { DEFAULT_PRICES_MICRO_USDC, ROUTE_NAMES, type RouteName } from '../targets/routes.js';
import { x402ExpressV2Knows } from '../targets/payment-v2.js';
import { startTarget, type RouteSettings, type Target } from '../targets/target.js';
import type { OnStop } from './chains.js';
import type { PeerWallets, StartPeersOptions, TargetOptions } from './types.js';

export interface TargetsSetting {
  networks: NetworkName[];
  options: StartPeersOptions;
  wallets: PeerWallets;
  facilitator: { url: string; solanaFeePayer: string };
  facilitatorV2: { url: string; pending: { url: string } };
  solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>>;
}

export async function startTargets(
  { networks, options, wallets, facilitator, facilitatorV2, solanaLedgers }: TargetsSetting,
  onStop: OnStop,
): Promise<Record<string, Target>> {
  const defaultPayTo = (network: NetworkName) =>
    isEvmNetwork(network) ? wallets.target.evm.address : wallets.target.solana.address;
  const targetOptions = options.targets ?? defaultTargets(networks, options.v2Targets ?? true);
  const targets: Record<string, Target> = {};
  const opened: Target[] = [];
  for (const target of targetOptions) {
    if (!networks.includes(target.network))
      throw new Error(`target ${target.name}: network ${target.network} is not started`);
    if (targets[target.name]) throw new Error(`two targets are named ${target.name}`);
    const prices = { ...DEFAULT_PRICES_MICRO_USDC, ...options.pricesMicroUsdc, ...target.pricesMicroUsdc };
    const routes = {} as Record<RouteName, RouteSettings>;
    for (const route of ROUTE_NAMES) {
      const network = target.routes?.[route]?.network ?? target.network;
      if (!networks.includes(network))
        throw new Error(`target ${target.name}, route ${route}: network ${network} is not started`);
      const payTo =
        target.routes?.[route]?.payTo ??
        (network === target.network ? target.payTo : undefined) ??
        defaultPayTo(network);
      routes[route] = { priceMicroUsdc: prices[route], network, payTo };
    }
    const started = await startTarget(
      {
        name: target.name,
        network: target.network,
        payTo: target.payTo ?? defaultPayTo(target.network),
        x402Version: target.x402Version,
        paymentLayer: target.paymentLayer,
        v2Offer: target.v2Offer,
        ...(target.solanaMint === undefined ? {} : { solanaMint: target.solanaMint }),
        routes,
        slowDelayMs: target.slowDelayMs ?? options.slowDelayMs,
        errorStatus: target.errorStatus,
        holdTimeoutMs: target.holdTimeoutMs ?? options.holdTimeoutMs,
        v2Extensions: target.v2Extensions,
        settlementPending: target.settlementPending,
      },
      {
        url: facilitator.url,
        solanaFeePayer: facilitator.solanaFeePayer,
        v2Url: facilitatorV2.url,
        v2PendingUrl: facilitatorV2.pending.url,
      },
    );
    onStop(() => started.close());
    targets[target.name] = started;
    if (target.openPayToAccounts !== false) opened.push(started);
  }
  // A payTo on Solana must hold a USDC account before anyone is asked to pay into it (unless the
  // target is meant to have none).
  await Promise.all(
    opened.flatMap((target) =>
      Object.values(target.routes)
        .filter((route) => isSolanaNetwork(route.network))
        .map((route) =>
          required(
            solanaLedgers[route.network as SolanaNetworkName],
            `the ledger of ${route.network}`,
          ).createUsdcAccount(route.payTo as SolanaAddress),
        ),
    ),
  );
  return targets;
}

/** The name of the default x402 version 2 target of a network. */
export function v2TargetName(network: NetworkName): string {
  return `v2-${network}`;
}

/** The name of the default batch-settlement target of an opt-in EVM network whose stablecoin has EIP-3009. */
export function batchTargetName(network: NetworkName): string {
  return `v2-batch-${network}`;
}

/** The EVM network's row, as a row (not one of the table's literal types). */
function evmRow(network: NetworkName): EvmNetworkRow | undefined {
  return isEvmNetwork(network) ? EVM_NETWORKS[network] : undefined;
}

/**
 * One x402 version 1 target per network (not where the stablecoin moves only through Permit2,
 * which version 1 cannot ask for), one version 2 target per network, and on the opt-in EVM
 * networks more version 2 targets: `v2-permit2-<network>` asking exact through Permit2 and
 * `v2-batch-<network>` asking batch-settlement (both where the network's own method is EIP-3009),
 * and `v2-upto-<network>` asking upto.
 */
function defaultTargets(networks: NetworkName[], withV2: boolean): TargetOptions[] {
  const v1 = networks
    .filter((network) => evmRow(network)?.transferMethod !== 'permit2')
    .map((network): TargetOptions => ({ name: network, network }));
  if (!withV2) return v1;
  const v2 = networks
    .filter(x402ExpressV2Knows)
    .map((network): TargetOptions => ({ name: v2TargetName(network), network, x402Version: 2 }));
  const permit2 = networks.flatMap((network): TargetOptions[] => {
    const row = evmRow(network);
    if (!row?.optIn) return [];
    const upto: TargetOptions = { name: `v2-upto-${network}`, network, x402Version: 2, v2Offer: { scheme: 'upto' } };
    if (row.transferMethod === 'permit2') return [upto];
    const exact: TargetOptions = {
      name: `v2-permit2-${network}`,
      network,
      x402Version: 2,
      v2Offer: { scheme: 'exact', assetTransferMethod: 'permit2' },
    };
    const batch: TargetOptions = {
      name: batchTargetName(network),
      network,
      x402Version: 2,
      v2Offer: { scheme: 'batch-settlement' },
    };
    return [exact, upto, batch];
  });
  return [...v1, ...v2, ...permit2];
}
