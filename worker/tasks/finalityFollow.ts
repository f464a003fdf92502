/**
 * Looks at every finality watch that is due (payments/tracking/finality.ts followDueFinalityWatches) and
 * queues itself again for the next one (unless a job already waits to run by then); with no watch
 * pending it ends, and the trigger that opens the next watch queues it again. Its job key and queue
 * keep one run at a time for the service; its priority puts it before every other job.
 */
import type { Task } from 'graphile-worker';
import { followDueFinalityWatches, queueFinalityFollow, type LossObserver } from '../../payments/tracking/finality';
import type { WorkerDeps } from '../deps';

export function finalityFollow(deps: WorkerDeps, onPaymentLost?: LossObserver): Task<'finality_follow'> {
  return async () => {
    const next = await followDueFinalityWatches({ ...deps, ...(onPaymentLost ? { onPaymentLost } : {}) });
    if (next) await queueFinalityFollow(deps.db, next);
  };
}
