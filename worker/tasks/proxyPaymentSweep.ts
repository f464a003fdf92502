/**
 * Every minute: proxy payments still open well after their request must have ended (a process
 * stopped between two steps) get a watch job, which settles them from the chain; rows that were
 * never signed are released by that job. The job key keeps one job per payment and a queued job
 * keeps its time, so sweeping again changes nothing.
 */
import type { Task } from 'graphile-worker';
import { enqueueWatch, openPaymentsBefore } from '../../payments/proxy/records';
import type { WorkerDeps } from '../deps';
import { NEVER_SIGNED_AFTER_MS } from './proxyPaymentWatch';

/** Rows looked at per run; the next run takes the rest. */
export const SWEEP_BATCH = 500;

export function proxyPaymentSweep(deps: WorkerDeps): Task<'proxy_payment_sweep'> {
  return async () => {
    const now = deps.clock.now();
    const stale = await openPaymentsBefore(deps.db, new Date(now.getTime() - NEVER_SIGNED_AFTER_MS), SWEEP_BATCH);
    for (const payment of stale) await enqueueWatch(deps.db, payment.id, undefined, { keepSchedule: true });
    if (stale.length > 0)
      deps.log.info(
        { task: 'proxy_payment_sweep', payments: stale.length },
        'open proxy payments handed to the watch job',
      );
  };
}
