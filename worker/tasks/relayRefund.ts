/**
 * relay_refund (job key relay_refund:<id>): sends or reconciles the refund of a relay
 * transaction (one per transaction, spec 3.6), retried a bounded number of times, and ends the
 * call's webhook record (payments/operations/relay/finish.ts followUpRefund). Enqueued in the transaction
 * that decides the refund.
 */
import type { Task } from 'graphile-worker';
import { followUpRefund } from '../../payments/operations/relay/finish';
import { enqueueRelayRefund } from '../../payments/operations/relay/outcome';
import type { WorkerDeps } from '../deps';
import { followUpTask } from './relayTask';

export const relayRefund = (deps: WorkerDeps): Task<'relay_refund'> =>
  followUpTask('relay_refund', deps, followUpRefund, (d, id, at) => enqueueRelayRefund(d.db, id, at));
