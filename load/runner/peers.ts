/**
 * Bench child: the local peers (devnet) for one network, base-sepolia: its chain with USDC,
 * the facilitator, and one x402 target whose /free, /paid and /hold routes the scenarios use.
 * The bench controls the /hold gate over IPC: stats, release, reset.
 */
import { startPeers } from '../../devnet/index';
import { defined } from './checked';
import { serveChild } from './children';

const holdTimeoutMs = Number(process.env.BENCH_HOLD_TIMEOUT_MS ?? 60_000);
const peers = await startPeers({ networks: ['base-sepolia'], holdTimeoutMs });
const target = defined(peers.targets['base-sepolia'], 'the base-sepolia target of the peers');

function stats() {
  return {
    arrivals: target.hold.arrivals,
    waiting: target.hold.waiting,
    maxWaiting: target.hold.maxWaiting,
    inFlight: target.inFlight,
    maxInFlight: target.maxInFlight,
  };
}

serveChild(
  {
    holdStats: () => stats(),
    holdRelease: (message: { count?: number | null }) => ({
      released: target.hold.release(message.count ?? undefined),
      ...stats(),
    }),
    holdWaitFor: async (message: { count: number; timeoutMs?: number }) => {
      await target.hold.waitForWaiting(message.count, message.timeoutMs ?? 10_000);
      return stats();
    },
    /** When the target received its latest requests (for timelines of paid calls). */
    requests: (message: { last?: number }) =>
      target.requests.slice(-(message.last ?? 100)).map((request) => ({
        route: request.route,
        paid: request.payment !== null,
        receivedAtMs: request.receivedAtMs,
        status: request.status,
      })),
    reset: () => {
      target.reset();
      return stats();
    },
  },
  {
    network: 'base-sepolia',
    rpcUrl: peers.rpcUrls['base-sepolia'],
    facilitatorUrl: peers.facilitator.url,
    targetUrl: target.url,
    routes: Object.fromEntries(Object.entries(target.routes).map(([name, route]) => [name, route.url])),
    priceMicroUsdc: String(target.routes.paid.priceMicroUsdc),
    serviceEvmPrivateKey: peers.wallets.service.evm.privateKey,
    clientEvmPrivateKey: peers.wallets.client.evm.privateKey,
  },
  () => peers.stop(),
);

// The target records every request it receives; under load that list is trimmed regularly.
setInterval(() => {
  if (target.requests.length > 10_000) target.requests.length = 0;
}, 1_000).unref();
