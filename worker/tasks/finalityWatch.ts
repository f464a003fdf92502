/**
 * A job of one finality watch, as they were queued before watches were followed in batches: its
 * watch is a pending row the `finality_follow` job looks at, so this only makes sure that job is
 * queued (looking here too could look at the watch twice at once).
 */
import type { Task } from 'graphile-worker';
import { queueFinalityFollow } from '../../payments/tracking/finality';
import type { WorkerDeps } from '../deps';

export function finalityWatch(deps: WorkerDeps): Task<'finality_watch'> {
  return async () => {
    await queueFinalityFollow(deps.db);
  };
}
