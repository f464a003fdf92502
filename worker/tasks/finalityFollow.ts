/**
 * Looks at every finality watch that is due (payments/finality.ts followDueFinalityWatches) and
 * queues itself again for the next one (unless a trigger already queued it); with no watch pending
 * it ends, and the trigger that opens the next watch queues it again. Its job key and queue keep one run at a time for the service.
 */
import type { Task } from 'graphile-worker';
import {
  finalityFollowWaiting,
  followDueFinalityWatches,
  queueFinalityFollow,
  type LossObserver,
} from '../../payments/finality';
import type { WorkerDeps } from '../deps';

export function finalityFollow(deps: WorkerDeps, onPaymentLost?: LossObserver): Task<'finality_follow'> {
  return async () => {
    const next = await followDueFinalityWatches({ ...deps, ...(onPaymentLost ? { onPaymentLost } : {}) });
    if (next && !(await finalityFollowWaiting(deps.db))) await queueFinalityFollow(deps.db, next);
  };
}
