/**
 * Bench child: the local peers (devnet) for one network, base-sepolia: its chain with USDC,
 * the facilitators, and two x402 targets: the version 1 one (x402-express 1.2) whose /free, /paid
 * and /hold routes the scenarios use, and a version 2 one (@x402/express 2.27, `v2-base-sepolia`)
 * whose /paid route the paid section compares with it. The bench controls the /hold gate over
 * IPC: stats, release, reset.
 */
import { startPeers, v2TargetName } from '../../devnet/index';
import { defined } from './checked';
import { serveChild } from './children';

const holdTimeoutMs = Number(process.env.BENCH_HOLD_TIMEOUT_MS ?? 60_000);
const peers = await startPeers({ networks: ['base-sepolia'], holdTimeoutMs });
const target = defined(peers.targets['base-sepolia'], 'the base-sepolia target of the peers');
const v2Target = defined(peers.targets[v2TargetName('base-sepolia')], 'the version 2 base-sepolia target of the peers');
/** The target a request names: the version 1 one unless `target` is 'v2'. */
const targetOf = (message: { target?: string | null }) => (message.target === 'v2' ? v2Target : target);

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
    /** When the target (`target: 'v2'`: the version 2 one) received its latest requests (for timelines of paid calls). */
    requests: (message: { last?: number; target?: string | null }) =>
      targetOf(message)
        .requests.slice(-(message.last ?? 100))
        .map((request) => ({
          route: request.route,
          paid: request.payment !== null,
          receivedAtMs: request.receivedAtMs,
          status: request.status,
        })),
    reset: () => {
      target.reset();
      v2Target.reset();
      return stats();
    },
  },
  {
    network: 'base-sepolia',
    rpcUrl: peers.rpcUrls['base-sepolia'],
    facilitatorUrl: peers.facilitator.url,
    targetUrl: target.url,
    routes: Object.fromEntries(Object.entries(target.routes).map(([name, route]) => [name, route.url])),
    v2TargetUrl: v2Target.url,
    v2Routes: Object.fromEntries(Object.entries(v2Target.routes).map(([name, route]) => [name, route.url])),
    priceMicroUsdc: String(target.routes.paid.priceMicroUsdc),
    serviceEvmPrivateKey: peers.wallets.service.evm.privateKey,
    clientEvmPrivateKey: peers.wallets.client.evm.privateKey,
  },
  () => peers.stop(),
);

// The target records every request it receives; under load that list is trimmed regularly.
setInterval(() => {
  for (const each of [target, v2Target]) if (each.requests.length > 10_000) each.requests.length = 0;
}, 1_000).unref();
