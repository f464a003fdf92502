/**
 * Batch-settlement voucher verifications per second on one core, in the bench's own process (one
 * thread): the checks /relay makes on a channel client's voucher before serving it, with no chain
 * read (load/runner/voucher-verify-bench.ts, which also runs alone).
 */
import { runVoucherBench, VOUCHER_GOAL_PER_S } from '../../voucher-verify-bench';
import { fmt, say } from '../output';
import type { Bench } from '../setup';

export const VOUCHERS_GOAL = `>= ${fmt.rps(VOUCHER_GOAL_PER_S)} batch-settlement voucher verifications/s on one core (channel binding, signature recovery, amounts; no chain read)`;

export function vouchers(bench: Bench): Promise<void> {
  say();
  say('## Channel vouchers: verifications per second on one core, in-process');
  const { perSecond, implementation } = runVoucherBench({
    count: 2_000,
    seconds: bench.options.durationS > 0 ? Math.min(bench.options.durationS, 10) : 5,
  });
  const figure = `${fmt.rps(perSecond)}/s (secp256k1 ${implementation})`;
  say(`  voucher verifications: ${figure}`);
  bench.results.vouchers = { perSecond, implementation };
  bench.goals.push({ goal: VOUCHERS_GOAL, figure, met: perSecond >= VOUCHER_GOAL_PER_S, measuredUs: 1e6 / perSecond });
  return Promise.resolve();
}
