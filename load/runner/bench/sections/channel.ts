/**
 * Channel: POST /proxy paying a batch-settlement target through our own channel, against the
 * unmodified @x402/fetch with @x402/evm's batch-settlement client paying that same target directly.
 * Both open their channel with one deposit large enough for the whole run (their first call, timed
 * apart), then pay by vouchers only: the measured calls wait for no block. Its own peers on Polygon
 * Amoy (load/runner/channelPeers.ts, on the server core) and a second service on them, on the
 * bench's database; the calls come from the load generator one at a time, the two contenders in
 * alternating halves. Also read from the local chain: the transactions our wallet sent during the
 * run (its deposit) and the channels contract's events (the seller's claims: none until it claims),
 * then the same after the target's channel manager claims and settles.
 */
import { itemAt } from '../../checked';
import { spawnChild } from '../../children';
import type { PaidResult } from '../../loadgen';
import { median } from '../../stats';
import { fmt, progress, say, SERVER_CORE } from '../output';
import { phasesOf, type Arrival, type PaidRun } from './paid';
import type { Bench } from '../setup';

export const CHANNEL_PROXY_BUDGET_MS = 5;
export const CHANNEL_PROXY_GOAL = `/proxy to a batch-settlement target adds <= ${CHANNEL_PROXY_BUDGET_MS} ms p50 over the direct @x402/fetch channel call`;
export const CHANNEL_RELAY_BATCH_BUDGET_MS = 20;
export const CHANNEL_RELAY_BATCH_GOAL = `a channel client through /relay to a batch-settlement target adds <= ${CHANNEL_RELAY_BATCH_BUDGET_MS} ms p50 over paying it directly`;
export const CHANNEL_RELAY_EXACT_BUDGET_MS = 150;
export const CHANNEL_RELAY_EXACT_GOAL = `a channel client through /relay to an exact target adds <= ${CHANNEL_RELAY_EXACT_BUDGET_MS} ms p50 over x402-fetch paying it directly`;

interface ChannelPeersInfo {
  network: string;
  chainId: number;
  caip2: `${string}:${string}`;
  usdc: `0x${string}`;
  rpcUrl: string;
  facilitatorUrl: string;
  targetUrl: string;
  paidUrl: string;
  exactUrl: string;
  priceMicroUsdc: string;
  serviceEvmPrivateKey: `0x${string}`;
  clientEvmPrivateKey: `0x${string}`;
}

interface OnChain {
  ourTransactions: number;
  ourDeposits: number;
  contractEvents: Record<string, number>;
}

const WARMUP_CALLS = 10;

/** The q-quantile of durations in ms (nearest rank). */
function quantile(values: number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return itemAt(sorted, Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1)), 'durations');
}

const durations = (result: PaidResult) => result.calls.map(([start, end]) => end - start);
const signed = (ms: number) => `${ms >= 0 ? '+' : ''}${fmt.ms(ms)}`;
const events = (chain: OnChain) =>
  Object.entries(chain.contractEvents)
    .map(([name, transactions]) => `${name} ${transactions}`)
    .join(', ') || 'none';

export async function channel(bench: Bench): Promise<void> {
  const { options } = bench;
  const calls = options.rounds >= 3 ? 200 : 100;
  say();
  say(
    `## Channel: POST /proxy paying a batch-settlement target through our channel vs @x402/fetch's batch-settlement client paying it directly (vouchers only after one deposit each; one call at a time, ${calls} calls each after ${WARMUP_CALLS} warm-up calls, in alternating halves)`,
  );
  progress('starting the Polygon Amoy peers of the channel section');
  const peersChild = await spawnChild({
    name: 'channel-peers',
    core: SERVER_CORE,
    script: 'load/runner/channelPeers.ts',
    ipc: true,
    echoStderr: true,
    readyTimeoutMs: 120_000,
  });
  const info = peersChild.info as ChannelPeersInfo;
  const price = BigInt(info.priceMicroUsdc);
  // One deposit covers every call of the run, on both sides: the first, the warm-up and the measured ones, with room to spare.
  const multiplier = Math.ceil((1 + WARMUP_CALLS + calls) * 1.2);
  const service = await bench.startService('channel', {
    NETWORKS: info.network,
    RPC_URL_POLYGON_AMOY: info.rpcUrl,
    EVM_PRIVATE_KEY: info.serviceEvmPrivateKey,
    FACILITATOR_URL: info.facilitatorUrl,
    SSRF_ALLOW_HOSTS: `${new URL(info.targetUrl).host},${new URL(info.exactUrl).host}`,
    PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(multiplier),
    // The client's channel with us (the relay comparisons).
    CHANNEL_RECEIVER_NETWORKS: info.network,
  });
  try {
    type Mode = 'channel' | 'proxy' | 'relay-channel' | 'direct';
    const run = (mode: Mode, count: number, targetUrl = info.paidUrl) =>
      bench.loadgen.call<PaidResult>(
        'paid',
        {
          run: {
            mode,
            url: service.url,
            targetUrl,
            apiKey: bench.bindings.apiKey,
            rpcUrl: info.rpcUrl,
            chainId: info.chainId,
            clientEvmPrivateKey: info.clientEvmPrivateKey,
            count,
            concurrency: 1,
            // Room for the direct channel's calls and, at price plus fee, the relay's to both targets.
            channel: { caip2: info.caip2, asset: info.usdc, depositAtomic: String(3n * BigInt(multiplier) * price) },
          },
        },
        600_000,
      );
    const failures: string[] = [];
    const checked = async (mode: Mode, count: number, targetUrl?: string) => {
      const result = await run(mode, count, targetUrl);
      const bad = count - (result.byStatus['200']?.count ?? 0);
      if (bad > 0) failures.push(`${mode}: ${bad} calls not 200 (first: ${result.failures[0] ?? '?'})`);
      return result;
    };
    const before = await peersChild.call<OnChain>('chain');
    progress('channel: the deposit calls, then the warm-up');
    const firstDirect = durations(await checked('channel', 1));
    const firstProxy = durations(await checked('proxy', 1));
    await checked('channel', WARMUP_CALLS);
    await checked('proxy', WARMUP_CALLS);
    const afterDeposits = await peersChild.call<OnChain>('chain');
    progress(`channel: ${calls} calls each`);
    const direct: number[] = [];
    const proxied: number[] = [];
    const phases = { direct: [] as PaidRun['phases'][], proxy: [] as PaidRun['phases'][] };
    // A direct call reaches the target twice (unpaid, then with the voucher); one through /proxy
    // once (the seller's 402 is kept from the call before): the arrival times split the call.
    const split = async (mode: 'channel' | 'proxy', count: number) => {
      await peersChild.call('reset');
      const result = await checked(mode, count);
      const perCall = mode === 'proxy' ? 1 : 2;
      const arrivals = await peersChild.call<Arrival[]>('requests', { last: perCall * count });
      phases[mode === 'channel' ? 'direct' : 'proxy'].push(
        perCall === 2 ? phasesOf(result, arrivals, 2).phases : voucherOnlyPhases(result, arrivals),
      );
      return durations(result);
    };
    for (const half of [0, 1]) {
      const count = half === 0 ? Math.floor(calls / 2) : calls - Math.floor(calls / 2);
      direct.push(...(await split('channel', count)));
      proxied.push(...(await split('proxy', count)));
    }
    const relayed = await relayComparisons(checked, info, calls);
    const afterRun = await peersChild.call<OnChain>('chain');
    progress('channel: the seller claims and settles');
    const claim = await peersChild.call<{ claims: number; settled: boolean }>('claim', {}, 180_000);
    const afterClaim = await peersChild.call<OnChain>('chain');

    const figures = {
      direct: { p50: quantile(direct, 0.5), p95: quantile(direct, 0.95), count: direct.length },
      proxy: { p50: quantile(proxied, 0.5), p95: quantile(proxied, 0.95), count: proxied.length },
    };
    const delta = figures.proxy.p50 - figures.direct.p50;
    const line = (name: string, figure: { p50: number; p95: number; count: number }, note: string) =>
      say(
        `  ${name.padEnd(52)} p50 ${fmt.ms(figure.p50).padStart(6)} ms  p95 ${fmt.ms(figure.p95).padStart(6)} ms  (${figure.count} calls)${note}`,
      );
    line('@x402/fetch batch-settlement -> target (direct)', figures.direct, '');
    line(
      'POST /proxy -> target, paid from our channel',
      figures.proxy,
      `  ${signed(delta)} ms p50 over the direct call`,
    );
    const phase = (side: 'direct' | 'proxy', name: keyof PaidRun['phases']) =>
      median(phases[side].flatMap((each) => each[name]));
    say(
      `  where the time goes (medians, from the target's arrival times; ms): direct: to the target ${fmt.ms(phase('direct', 'toTarget'))}, 402 -> voucher request ${fmt.ms(phase('direct', 'toPaidRequest'))}; ` +
        `/proxy: to the voucher request ${fmt.ms(phase('proxy', 'toTarget'))} (no 402 asked: the seller's is kept; our hold, lock, voucher row, signing); ` +
        `voucher request -> answer direct ${fmt.ms(phase('direct', 'toAnswer'))}, /proxy ${fmt.ms(phase('proxy', 'toAnswer'))} (the target's own work, then our record of the answer, the charge)`,
    );
    say(
      `  first call (the deposit, settled on chain): direct ${fmt.ms(firstDirect[0] ?? NaN)} ms, /proxy ${fmt.ms(firstProxy[0] ?? NaN)} ms`,
    );
    const ours = (chain: OnChain) => chain.ourTransactions - before.ourTransactions;
    say(
      `  on chain, for ${calls + WARMUP_CALLS + 1} calls through /proxy and as many through /relay to the same seller (one channel of ours): ${afterRun.ourDeposits - before.ourDeposits} deposit(s) into our channel ` +
        `(${afterDeposits.ourDeposits - before.ourDeposits} by the end of the warm-up; an ERC-3009 authorization our wallet signs, submitted by the seller's facilitator), ` +
        `${ours(afterRun)} transaction(s) sent by our wallet itself; the channels contract's events, in transactions: ${events(afterRun)} ` +
        `(the seller's claims: none before it claims)`,
    );
    say(
      `  after the seller's channel manager claimed and settled (${claim.claims} claim transaction(s)${claim.settled ? ', one settle' : ''}): ${events(afterClaim)}; ` +
        `our wallet: ${afterClaim.ourDeposits - before.ourDeposits} deposit(s), ${ours(afterClaim)} transaction(s) of its own`,
    );
    for (const comparison of relayed) {
      line(comparison.baselineName, comparison.baseline, '');
      line(comparison.name, comparison.contender, `  ${signed(comparison.delta)} ms p50 over the direct call`);
    }
    say(
      `  first relayed call (the client's deposit into its channel with us, settled on chain): ${fmt.ms(relayed[0]?.first ?? NaN)} ms; ` +
        `the exact target's calls each wait for one settlement on both sides (the target's), the batch-settlement target's for none (local chain mining each transaction at once)`,
    );
    if (failures.length > 0) say(`  FAILED CALLS: ${failures.join('; ')}`);
    bench.results.channel = {
      relayed,
      phases,
      calls,
      warmup: WARMUP_CALLS,
      figures,
      delta,
      before,
      afterDeposits,
      afterRun,
      claim,
      afterClaim,
      failures,
    };
    bench.goals.push({
      goal: CHANNEL_PROXY_GOAL,
      figure: `${signed(delta)} ms (${fmt.ms(figures.proxy.p50)} vs ${fmt.ms(figures.direct.p50)} ms)`,
      met: failures.length === 0 && delta <= CHANNEL_PROXY_BUDGET_MS,
      measuredUs: delta * 1000,
    });
    for (const comparison of relayed)
      bench.goals.push({
        goal: comparison.goal,
        figure: `${signed(comparison.delta)} ms (${fmt.ms(comparison.contender.p50)} vs ${fmt.ms(comparison.baseline.p50)} ms)`,
        met: failures.length === 0 && comparison.delta <= comparison.budgetMs,
        measuredUs: comparison.delta * 1000,
      });
  } finally {
    await bench.stopService(service);
    await peersChild.stop();
  }
}

interface Figure {
  p50: number;
  p95: number;
  count: number;
}

const figureOf = (values: number[]): Figure => ({
  p50: quantile(values, 0.5),
  p95: quantile(values, 0.95),
  count: values.length,
});

interface RelayComparison {
  name: string;
  baselineName: string;
  goal: string;
  budgetMs: number;
  baseline: Figure;
  contender: Figure;
  delta: number;
  first: number;
}

/**
 * A channel client paying POST /relay (the unmodified @x402/fetch with @x402/evm's batch-settlement
 * client, one deposit into its channel with us, then vouchers) against paying the target directly:
 * the batch-settlement target (the direct channel client as baseline; we pay it from our own
 * channel) and the exact target (x402-fetch paying it directly as baseline; we pay it exact, its
 * settlement waited for as the direct client waits for it). Alternating halves after a warm-up.
 */
async function relayComparisons(
  checked: (mode: 'channel' | 'relay-channel' | 'direct', count: number, targetUrl?: string) => Promise<PaidResult>,
  info: ChannelPeersInfo,
  calls: number,
): Promise<RelayComparison[]> {
  progress('channel: a channel client through /relay, its deposit, then the warm-up');
  const first = durations(await checked('relay-channel', 1, info.paidUrl))[0] ?? NaN;
  await checked('relay-channel', WARMUP_CALLS, info.paidUrl);
  await checked('relay-channel', WARMUP_CALLS, info.exactUrl);
  await checked('direct', WARMUP_CALLS, info.exactUrl);
  const cases = [
    {
      name: '@x402/fetch channel -> POST /relay -> batch target',
      baselineName: '@x402/fetch batch-settlement -> target (direct)',
      goal: CHANNEL_RELAY_BATCH_GOAL,
      budgetMs: CHANNEL_RELAY_BATCH_BUDGET_MS,
      baselineMode: 'channel' as const,
      url: info.paidUrl,
      count: calls,
    },
    {
      name: '@x402/fetch channel -> POST /relay -> exact target',
      baselineName: 'x402-fetch -> exact target (direct)',
      goal: CHANNEL_RELAY_EXACT_GOAL,
      budgetMs: CHANNEL_RELAY_EXACT_BUDGET_MS,
      baselineMode: 'direct' as const,
      url: info.exactUrl,
      // Each call of either side settles on chain: fewer of them.
      count: Math.ceil(calls / 2),
    },
  ];
  const comparisons: RelayComparison[] = [];
  for (const each of cases) {
    progress(`channel: ${each.name}, ${each.count} calls each`);
    const baseline: number[] = [];
    const contender: number[] = [];
    for (const half of [0, 1]) {
      const count = half === 0 ? Math.floor(each.count / 2) : each.count - Math.floor(each.count / 2);
      baseline.push(...durations(await checked(each.baselineMode, count, each.url)));
      contender.push(...durations(await checked('relay-channel', count, each.url)));
    }
    const figures = { baseline: figureOf(baseline), contender: figureOf(contender) };
    comparisons.push({
      name: each.name,
      baselineName: each.baselineName,
      goal: each.goal,
      budgetMs: each.budgetMs,
      ...figures,
      delta: figures.contender.p50 - figures.baseline.p50,
      first,
    });
  }
  return comparisons;
}

/** A call that reached the target once, with its voucher: to that request, and from it to the answer. */
function voucherOnlyPhases(result: PaidResult, arrivals: Arrival[]): PaidRun['phases'] {
  const phases = { toTarget: [] as number[], toPaidRequest: [] as number[], toAnswer: [] as number[] };
  if (arrivals.length !== result.calls.length) return phases;
  result.calls.forEach(([start, end], index) => {
    const request = arrivals[index];
    if (request === undefined || !request.paid) return;
    phases.toTarget.push(request.receivedAtMs - start);
    phases.toAnswer.push(end - request.receivedAtMs);
  });
  return phases;
}
