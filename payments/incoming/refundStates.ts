/**
 * The moves of a refund (refunds.status), and the one function that writes them. Every arrow
 * below is in REFUND_MOVES and every move of REFUND_MOVES is an arrow below
 * (test/db/state-tables.test.ts); states joined by a bar are reached alike.
 *
 *   pending -> confirmed | failed
 *
 * A refund row is written pending, with a partial unique index allowing one pending or confirmed
 * refund per relay transaction. A failed refund stays failed: trying again (the refund job, or an
 * operator after it gave up) writes a new pending row, so every attempt keeps its own error.
 */
import { sql, type Selectable, type UpdateObject } from 'kysely';
import type { Database, Db, Tx } from '../../db/index';
import type { RefundStatus, RefundsTable } from '../../db/schema';
import { allowedFrom, type MoveTable } from '../basics/states';

export const REFUND_MOVES = {
  pending: ['confirmed', 'failed'],
  confirmed: [],
  failed: [],
} as const satisfies MoveTable<RefundStatus>;

/**
 * Moves refund `id` to `to` from a status REFUND_MOVES allows, with `set`, in one guarded update.
 * Returns the row as moved, or undefined when it was in no such status.
 */
export async function moveRefund(
  db: Db | Tx,
  id: bigint,
  to: RefundStatus,
  set: Omit<UpdateObject<Database, 'refunds'>, 'status'> = {},
): Promise<Selectable<RefundsTable> | undefined> {
  const states = allowedFrom<RefundStatus>('refund', REFUND_MOVES, to);
  return db
    .updateTable('refunds')
    .set({ ...set, status: to, updated_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('status', 'in', states)
    .returningAll()
    .executeTakeFirst();
}
