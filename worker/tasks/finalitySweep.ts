/**
 * Every minute, on every instance: the follow job is queued when a pending finality watch is past
 * its look by more than FINALITY_LOOK_GRACE_MS (its job was lost, failed for good, or waits on a
 * retry), and watches still not final after their network's watch bound
 * (payments/basics/networkTable.ts) are reported. The follow job's key keeps one such job, and one queued
 * for later is moved to now (a job waiting for a later look must not hold back a late one), so
 * sweeping again (or from another instance) changes nothing more.
 */
import type { Task } from 'graphile-worker';
import { lateFinalityLook, overdueFinalityWatches, queueFinalityFollow } from '../../payments/tracking/finality';
import type { WorkerDeps } from '../deps';

/** Rows looked at per run; the next run takes the rest. */
export const FINALITY_SWEEP_BATCH = 500;

export function finalitySweep(deps: WorkerDeps): Task<'finality_sweep'> {
  return async () => {
    if (await lateFinalityLook(deps.db)) await queueFinalityFollow(deps.db);
    const overdue = await overdueFinalityWatches(deps.db, deps, deps.clock.now(), FINALITY_SWEEP_BATCH);
    if (overdue.length > 0)
      deps.log.warn(
        { task: 'finality_sweep', watches: overdue.length },
        'payments not final after their watch bound: still followed by the finality_follow job',
      );
  };
}
