/**
 * Every minute: chat payments whose request stopped half-way are finished (payments/operations/chat/call.ts
 * followUpChatPayment): closed when nothing was settled, delivered when the answer was given,
 * refunded when the payment settled without an answer. Safe to repeat.
 */
import type { Task } from 'graphile-worker';
import { followUpChatPayment, openChatPayments } from '../../payments/operations/chat/call';
import type { WorkerDeps } from '../deps';

/** Rows looked at per run; the next run takes the rest. */
export const CHAT_FOLLOW_UP_BATCH = 100;

export function chatFollowUp(deps: WorkerDeps): Task<'chat_follow_up'> {
  return async () => {
    const ids = await openChatPayments(deps.db, deps.clock.now(), CHAT_FOLLOW_UP_BATCH);
    for (const id of ids) {
      const outcome = await followUpChatPayment(deps, id);
      deps.log.info({ task: 'chat_follow_up', relayTxId: String(id), outcome }, 'chat payment followed up');
    }
  };
}
