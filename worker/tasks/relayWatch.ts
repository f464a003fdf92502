/**
 * relay_watch (job key relay_watch:<id>): finishes a relay transaction its request left open
 * (payments/relay/followUp.ts followUpRelay): the client's payment settled or given up, our
 * payment to the target read on-chain, then delivered or handed to a refund. Enqueued when the
 * payment is admitted (for the moment its request must be over) and whenever the request leaves
 * the transaction open.
 */
import type { Task } from 'graphile-worker';
import { followUpRelay } from '../../payments/relay/followUp';
import { enqueueRelayWatch, RELAY_WATCH_TASK } from '../../payments/relay/outcome';
import type { WorkerDeps } from '../deps';
import { followUpTask } from './relayFollowUp';

export const RELAY_WATCH = RELAY_WATCH_TASK;

export const relayWatch = (deps: WorkerDeps): Task =>
  followUpTask(RELAY_WATCH, deps, followUpRelay, (d, id, at) => enqueueRelayWatch(d.db, id, at));
