/**
 * credit_purchase_watch (job key credit_purchase_watch:<id>): finishes a purchase of credits its
 * request left settling (payments/operations/purchase/call.ts followUpPurchase): the payment is settled or read
 * from the chain, then the credits are added once, or the purchase fails. Enqueued with the
 * purchase; queued again while the chain has not decided.
 */
import type { Task } from 'graphile-worker';
import { addJob } from '../../payments/basics/jobs';
import { followUpPurchase } from '../../payments/operations/purchase/call';
import type { WorkerDeps } from '../deps';

/** How long the job waits before it reads the chain again for a payment still settling. */
export const PURCHASE_LOOK_AGAIN_MS = 2_000;

export function creditPurchaseWatch(deps: WorkerDeps): Task<'credit_purchase_watch'> {
  return async (payload) => {
    const raw = (payload as { creditPurchaseId?: unknown } | null)?.creditPurchaseId;
    if (typeof raw !== 'string' || !/^[1-9][0-9]{0,18}$/.test(raw))
      throw new Error('credit_purchase_watch: payload needs creditPurchaseId as a decimal string');
    const outcome = await followUpPurchase(deps, BigInt(raw));
    deps.log.info({ task: 'credit_purchase_watch', creditPurchaseId: raw, outcome }, 'credit purchase followed up');
    if (outcome !== 'still_settling') return;
    await addJob(deps.db, {
      task: 'credit_purchase_watch',
      payload: { creditPurchaseId: raw },
      key: `credit_purchase_watch:${raw}`,
      runAt: new Date(deps.clock.now().getTime() + PURCHASE_LOOK_AGAIN_MS),
    });
  };
}
