/**
 * Finishing a payment we received that its request left open (the request gave up, timed out or
 * its process died), for every mode that takes a client's payment (/relay, paid chat). The walk
 * over the relay transaction's states is here once; what a mode does at each step is passed in as
 * FollowUpRules. The row is read again after each move, every move is a guarded update, so a
 * follow-up that runs twice does nothing more.
 *
 *   received        the request may still settle it (rules.requestActive), else given up:
 *                   settle_failed, nothing was charged -> rules.neverSettled
 *   settling        the request may still be settling it (rules.requestActive); else, by our wallet
 *                   with nothing stored to broadcast, given up as received is; else the chain is
 *                   read: still unconfirmed -> rules.settlementPending; failed -> rules.neverSettled
 *   settled         rules.settled (deliver, refund or wait: the mode's own rule)
 *   any other state rules.inState[state] when the mode acts on it, else rules.otherwise
 */
import type { RelayTransactionState } from '../../db/schema';
import type { Db } from '../../db/index';
import type { Deps } from '../deps';
import { reconcileSettlement } from './settle';
import { findRelayTransaction, getRelayTransaction, markSettleFailed, type RelayTransaction } from './store';

type Step<R> = (row: RelayTransaction) => R | Promise<R>;

export interface FollowUpRules<R> {
  /** The rows this mode finishes (relay_transactions.mode); another mode's row is `missing`. */
  mode: 'relay' | 'chat';
  missing: () => R;
  /** While the request that took the payment may still act on it: the result that says when to look again; undefined to act now. */
  requestActive?: (row: RelayTransaction, state: 'received' | 'settling') => R | undefined;
  /** The failure details written when a received payment is given up. */
  abandonedDetails: string;
  /** The settlement was broadcast and the chain does not show its outcome yet. */
  settlementPending: Step<R>;
  /** The payment did not settle and never will: given up here, or its settlement failed. */
  neverSettled: Step<R>;
  /** The client's payment is settled: deliver, refund or look again, as the mode decides. */
  settled: Step<R>;
  /** The states past settlement that the mode acts on when a row is found in them. */
  inState?: Partial<Record<RelayTransactionState, Step<R>>>;
  /** Every other state: nothing left to do. */
  otherwise: Step<R>;
}

export async function followUpOpenPayment<R>(
  deps: Pick<Deps, 'db' | 'chains' | 'paymentBounds'> & Partial<Pick<Deps, 'submissions' | 'clock'>>,
  relayTxId: bigint,
  rules: FollowUpRules<R>,
): Promise<R> {
  const db: Db = deps.db;
  let row = await findRelayTransaction(db, relayTxId);
  if (!row || row.mode !== rules.mode) return rules.missing();

  if (row.state === 'received') {
    const wait = rules.requestActive?.(row, 'received');
    if (wait !== undefined) return wait;
    await markSettleFailed(db, relayTxId, 'abandoned', rules.abandonedDetails);
    row = await getRelayTransaction(db, relayTxId);
    if (row.state === 'settle_failed') return rules.neverSettled(row);
  }
  if (row.state === 'settling') {
    const wait = rules.requestActive?.(row, 'settling');
    if (wait !== undefined) return wait;
    // Settled by our wallet, the transaction is stored before it is broadcast: none stored, none sent
    // (a request still on its way to sending finds the row moved and sends nothing).
    if (row.settle_method === 'direct' && row.client_tx_hash === null) {
      await markSettleFailed(db, relayTxId, 'abandoned', rules.abandonedDetails);
      row = await getRelayTransaction(db, relayTxId);
      if (row.state === 'settle_failed') return rules.neverSettled(row);
    }
  }
  if (row.state === 'settling') {
    const settlement = await reconcileSettlement(db, relayTxId, deps);
    if (settlement.kind === 'pending') return rules.settlementPending(row);
    row = await getRelayTransaction(db, relayTxId);
    if (settlement.kind !== 'settled' && row.state === 'settle_failed') return rules.neverSettled(row);
  }
  if (row.state === 'settled') return rules.settled(row);
  const step = rules.inState?.[row.state];
  return step ? step(row) : rules.otherwise(row);
}
