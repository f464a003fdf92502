/**
 * relay_watch (job key relay_watch:<id>): finishes a relay transaction its request left open
 * (payments/operations/relay/finish.ts followUpRelay): the client's payment settled or given up, our
 * payment to the target read on-chain, then delivered or handed to a refund. Enqueued whenever
 * the request leaves the transaction open, and by the sweep; an admitted payment is first looked
 * at by the relay_follow job (payments/operations/relay/follow.ts), through the same step.
 */
import type { Task } from 'graphile-worker';
import { followUpRelay } from '../../payments/operations/relay/finish';
import { enqueueRelayWatch } from '../../payments/operations/relay/outcome';
import type { WorkerDeps } from '../deps';
import { followUpTask } from './relayTask';

export const relayWatch = (deps: WorkerDeps): Task<'relay_watch'> =>
  followUpTask('relay_watch', deps, followUpRelay, (d, id, at) => enqueueRelayWatch(d.db, id, at));
