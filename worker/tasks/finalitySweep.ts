/**
 * Every minute, on every instance: settled transactions still not final after their network's
 * watch bound (payments/networkTable.ts) are reconciled against the chain by their watch job. The
 * job key keeps one job per watch and a queued job keeps its time, so sweeping again (or from
 * another instance) changes nothing; a job whose row was lost is enqueued again.
 */
import type { Task } from 'graphile-worker';
import { enqueueFinalityWatch, overdueFinalityWatches } from '../../payments/finality';
import type { WorkerDeps } from '../deps';

/** Rows looked at per run; the next run takes the rest. */
export const FINALITY_SWEEP_BATCH = 500;

export function finalitySweep(deps: WorkerDeps): Task<'finality_sweep'> {
  return async () => {
    const overdue = await overdueFinalityWatches(deps.db, deps, deps.clock.now(), FINALITY_SWEEP_BATCH);
    for (const watch of overdue) await enqueueFinalityWatch(deps.db, watch.id, undefined, { keepSchedule: true });
    if (overdue.length > 0)
      deps.log.warn(
        { task: 'finality_sweep', watches: overdue.length },
        'payments not final after their watch bound handed to their watch jobs',
      );
  };
}
