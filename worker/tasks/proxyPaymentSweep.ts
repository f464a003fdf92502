/**
 * Every minute: proxy payments still open well after their request must have ended (a process
 * stopped between two steps), and signed ones whose authorization expired a while ago (their
 * request could not hand them to the watch job, as when the database dropped its connections) get
 * a watch job, which settles them from the chain; rows that were never signed are released by that
 * job. The job key keeps one job per payment and a queued job keeps its time, so sweeping again
 * changes nothing.
 */
import type { Task } from 'graphile-worker';
import { enqueueWatch, openPaymentsToWatch } from '../../payments/operations/proxy/records';
import type { WorkerDeps } from '../deps';
import { NEVER_SIGNED_AFTER_MS } from './proxyPaymentWatch';

/** A signed payment whose authorization expired this long ago is handed to the watch job, whatever its age. */
export const EXPIRED_UNWATCHED_AFTER_MS = 30_000;

/** Rows looked at per run; the next run takes the rest. */
export const SWEEP_BATCH = 500;

export function proxyPaymentSweep(deps: WorkerDeps): Task<'proxy_payment_sweep'> {
  return async () => {
    const now = deps.clock.now();
    const stale = await openPaymentsToWatch(
      deps.db,
      {
        before: new Date(now.getTime() - NEVER_SIGNED_AFTER_MS),
        expiredBefore: BigInt(Math.floor((now.getTime() - EXPIRED_UNWATCHED_AFTER_MS) / 1000)),
      },
      SWEEP_BATCH,
    );
    for (const payment of stale) await enqueueWatch(deps.db, payment.id, undefined, { keepSchedule: true });
    if (stale.length > 0)
      deps.log.info(
        { task: 'proxy_payment_sweep', payments: stale.length },
        'open proxy payments handed to the watch job',
      );
  };
}
