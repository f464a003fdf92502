/**
 * relay_watch (job key relay_watch:<id>): finishes a relay transaction its request left open
 * (payments/relay/finish.ts followUpRelay): the client's payment settled or given up, our
 * payment to the target read on-chain, then delivered or handed to a refund. Enqueued when the
 * payment is admitted (for the moment its request must be over) and whenever the request leaves
 * the transaction open.
 */
import type { Task } from 'graphile-worker';
import { followUpRelay } from '../../payments/relay/finish';
import { enqueueRelayWatch } from '../../payments/relay/outcome';
import type { WorkerDeps } from '../deps';
import { followUpTask } from './relayTask';

export const relayWatch = (deps: WorkerDeps): Task<'relay_watch'> =>
  followUpTask('relay_watch', deps, followUpRelay, (d, id, at) => enqueueRelayWatch(d.db, id, at));
