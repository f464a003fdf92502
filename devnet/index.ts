// startPeers() brings up every real peer the service talks to, on 127.0.0.1 only: a local EVM chain
// per chosen EVM network (real chain id, USDC at the canonical address), a litesvm ledger per
// Solana cluster behind its own JSON-RPC endpoint, an x402 version 1 facilitator and a version 2
// one (@x402/core's), and x402-protected targets of both versions. It
// depends on nothing from vitest: the service's sandbox mode starts it from a plain tsx process.
import type { LocalEvmChain } from './evm/chain.js';
import type { LocalUsdc } from './evm/usdc.js';
import { createEvmFacilitator } from './facilitator/evm.js';
import { startFacilitator } from './facilitator/server.js';
import { createSvmFacilitator } from './facilitator/svm.js';
import { startFacilitatorV2 } from './facilitator/v2.js';
import { KeyedQueue } from './key-queue.js';
import {
  NETWORK_NAMES,
  isEvmNetwork,
  isSolanaNetwork,
  type EvmNetworkName,
  type NetworkName,
  type SolanaNetworkName,
} from './networks.js';
import { startEvmNetwork, startSolanaCluster, type OnStop } from './peers/chains.js';
import { peerMethods } from './peers/methods.js';
import { startTargets } from './peers/targets.js';
import type { Peers, StartPeersOptions } from './peers/types.js';
import { createPeerKeys } from './peers/wallets.js';
import { required } from './required.js';
import type { SolanaLedger } from './svm/ledger.js';
import type { SolanaRpcServer } from './svm/rpc-server.js';

export * from './networks.js';
export * from './x402.js';
export {
  ROUTE_NAMES,
  ROUTE_PATHS,
  DEFAULT_PRICES_MICRO_USDC,
  type RouteName,
  type EchoedRequest,
} from './targets/routes.js';
export type { Target, RecordedRequest, RouteSettings } from './targets/target.js';
export type { FacilitatorCall } from './facilitator/server.js';
export type { FacilitatorV2Call } from './facilitator/v2.js';
export type { PaymentLayerName, X402Version } from './targets/payment.js';
export { batchTargetName, v2TargetName } from './peers/targets.js';
export type { SolanaKey } from './svm/keys.js';
export type { AuthorizationOverrides, SignedEvmPayment } from './evm/authorization.js';
export type { SolanaPaymentOverrides, SignedSolanaPayment } from './svm/payment-client.js';
export type { TargetOptions, StartPeersOptions, EvmWallet, PeerWallets, Peers } from './peers/types.js';

const MICRO_USDC_PER_USDC = 1_000_000n;

export async function startPeers(options: StartPeersOptions = {}): Promise<Peers> {
  const startedAt = performance.now();
  const networks = [...new Set(options.networks ?? NETWORK_NAMES)];
  const evmNetworks = networks.filter(isEvmNetwork);
  const solanaNetworks = networks.filter(isSolanaNetwork);
  const funding = {
    serviceMicroUsdc: options.funding?.serviceMicroUsdc ?? 1_000n * MICRO_USDC_PER_USDC,
    clientMicroUsdc: options.funding?.clientMicroUsdc ?? 100n * MICRO_USDC_PER_USDC,
  };
  const queue = new KeyedQueue();
  const stoppers: Array<() => Promise<void>> = [];
  const onStop: OnStop = (close) => stoppers.push(close);
  const stop = async () => {
    const pending = stoppers.splice(0).reverse();
    await Promise.allSettled(pending.map((close) => close()));
  };

  const keys = await createPeerKeys(options.keys);
  const { wallets, facilitatorEvm, facilitatorV2Evm, feePayer, feePayerV2 } = keys;

  try {
    const evmChains: Partial<Record<EvmNetworkName, LocalEvmChain>> = {};
    const usdcContracts: Partial<Record<EvmNetworkName, LocalUsdc>> = {};
    const solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>> = {};
    const rpcServers: Partial<Record<SolanaNetworkName, SolanaRpcServer>> = {};
    await Promise.all([
      ...evmNetworks.map(async (network) => {
        const { chain, usdc } = await startEvmNetwork(network, keys, funding, queue, onStop);
        evmChains[network] = chain;
        usdcContracts[network] = usdc;
      }),
      ...solanaNetworks.map(async (network) => {
        const { ledger, server } = await startSolanaCluster(network, keys, funding, onStop);
        solanaLedgers[network] = ledger;
        rpcServers[network] = server;
      }),
    ]);

    const evmChain = (network: EvmNetworkName) => required(evmChains[network], `the local chain of ${network}`);
    const rpcServer = (network: SolanaNetworkName) =>
      required(rpcServers[network], `the JSON-RPC server of ${network}`);
    const rpcUrls: Partial<Record<NetworkName, string>> = {};
    for (const network of evmNetworks) rpcUrls[network] = evmChain(network).rpcUrl;
    for (const network of solanaNetworks) rpcUrls[network] = rpcServer(network).url;

    const facilitatorServer = await startFacilitator({
      evm: createEvmFacilitator(
        new Map(evmNetworks.map((network) => [network, evmChain(network)])),
        facilitatorEvm.account,
        queue,
      ),
      svm: createSvmFacilitator(
        new Map(solanaNetworks.map((network) => [network, rpcServer(network).url])),
        feePayer.signer,
        queue,
      ),
      evmNetworks,
      solanaNetworks,
    });
    onStop(() => facilitatorServer.close());
    const facilitatorV2 = await startFacilitatorV2({
      evmChains: new Map(evmNetworks.map((network) => [network, evmChain(network)])),
      evmAccount: facilitatorV2Evm.account,
      solanaRpcUrls: new Map(solanaNetworks.map((network) => [network, rpcServer(network).url])),
      solanaFeePayer: feePayerV2.signer,
      queue,
      ...(options.pendingSettlementReleaseMs === undefined
        ? {}
        : { pendingReleaseAfterMs: options.pendingSettlementReleaseMs }),
    });
    onStop(async () => {
      facilitatorV2.pending.held.drop();
      await facilitatorV2.close();
    });

    const targets = await startTargets(
      { networks, options, wallets, facilitator: facilitatorServer, facilitatorV2, solanaLedgers },
      onStop,
    );

    return {
      networks,
      evmNetworks,
      solanaNetworks,
      rpcUrls,
      facilitator: {
        url: facilitatorServer.url,
        solanaFeePayer: facilitatorServer.solanaFeePayer,
        evmAddress: facilitatorEvm.address,
        calls: facilitatorServer.calls,
      },
      facilitatorV2: {
        url: facilitatorV2.url,
        evmAddress: facilitatorV2Evm.address,
        solanaFeePayer: facilitatorV2.solanaFeePayer,
        calls: facilitatorV2.calls,
        pending: facilitatorV2.pending,
      },
      targets,
      wallets,
      evmChains,
      solanaLedgers,
      startupMs: Math.round(performance.now() - startedAt),
      ...peerMethods({ solanaNetworks, rpcUrls, evmChains, usdcContracts, solanaLedgers, wallets }),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
