/**
 * Every minute: relay transactions whose job may have been lost (a process stopped between a
 * commit and its job, or before a job existed) get one again. Open rows are looked at once their
 * request is presumed gone; refunds whose record is still in flight get their refund job; the
 * follow job is queued while a row is overdue for its look (payments/operations/relay/follow.ts). The job
 * keys keep one job per transaction and a queued job keeps its time, so sweeping again changes nothing.
 */
import type { Task } from 'graphile-worker';
import { strandedRelayTransactions } from '../../payments/operations/relay/finish';
import { lateRelayLook, queueRelayFollow } from '../../payments/operations/relay/follow';
import { enqueueRelayRefund, enqueueRelayWatch } from '../../payments/operations/relay/outcome';
import type { WorkerDeps } from '../deps';

/** Rows looked at per run and kind; the next run takes the rest. */
export const RELAY_SWEEP_BATCH = 500;

export function relaySweep(deps: WorkerDeps): Task<'relay_sweep'> {
  return async () => {
    // A row overdue for its look: the follow job was lost, failed for good, or waits on a retry.
    if (await lateRelayLook(deps.db)) await queueRelayFollow(deps.db);
    const { open, refunding } = await strandedRelayTransactions(
      deps.db,
      deps.clock.now(),
      deps.config.relayAbandonedAfterMs,
      RELAY_SWEEP_BATCH,
    );
    for (const id of open) await enqueueRelayWatch(deps.db, id, undefined, { keepSchedule: true });
    for (const id of refunding) await enqueueRelayRefund(deps.db, id, undefined, { keepSchedule: true });
    if (open.length + refunding.length > 0)
      deps.log.info(
        { task: 'relay_sweep', open: open.length, refunding: refunding.length },
        'stranded relay transactions handed to their jobs',
      );
  };
}
