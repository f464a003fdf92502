/**
 * relay_follow: looks at every open relay transaction whose look is due (payments/operations/relay/follow.ts
 * followDueRelayTransactions) and queues itself again for the next one; with no row followed it
 * ends, and the admission of the next payment queues it again. Its job key and queue keep one run
 * at a time for the service.
 */
import type { Task } from 'graphile-worker';
import { followDueRelayTransactions, queueRelayFollow } from '../../payments/operations/relay/follow';
import type { WorkerDeps } from '../deps';

export const relayFollow =
  (deps: WorkerDeps): Task<'relay_follow'> =>
  async () => {
    const next = await followDueRelayTransactions(deps);
    if (next) await queueRelayFollow(deps.db, next);
  };
