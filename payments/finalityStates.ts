/**
 * The moves of a finality watch (finality_watches.finality), and the one function that writes them.
 * Every arrow below is in FINALITY_MOVES and every move of FINALITY_MOVES is an arrow below
 * (test/db/state-tables.test.ts).
 *
 *   pending -> pending | final | lost
 *
 *   pending  the transaction is settled (in a block, or sent again after a reorg dropped it), not final
 *   final    its block is at the network's finality rule (payments/networkTable.ts)
 *   lost     the chain dropped it and it can no longer land: the amount is at risk
 *
 * pending moves onto itself when the transaction watched changes (sent again, or found in another
 * transaction of the same transfer). final and lost are final.
 */
import { sql, type Selectable, type UpdateObject } from 'kysely';
import type { Database, Db, Tx } from '../db/index';
import type { Finality, FinalityWatchesTable } from '../db/schema';
import { allowedFrom, type MoveTable } from './states';

export const FINALITY_MOVES = {
  pending: ['pending', 'final', 'lost'],
  final: [],
  lost: [],
} as const satisfies MoveTable<Finality>;

/**
 * Moves watch `id` to `to` from a state FINALITY_MOVES allows, with `set`, in one guarded update.
 * Returns the row as moved, or undefined when it was in no such state (another run moved it first).
 */
export async function moveFinalityWatch(
  db: Db | Tx,
  id: bigint,
  to: Finality,
  set: Omit<UpdateObject<Database, 'finality_watches'>, 'finality'> = {},
): Promise<Selectable<FinalityWatchesTable> | undefined> {
  const states = allowedFrom<Finality>('finality watch', FINALITY_MOVES, to);
  return db
    .updateTable('finality_watches')
    .set({ ...set, finality: to, updated_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('finality', 'in', states)
    .returningAll()
    .executeTakeFirst();
}

/**
 * Moves watch `id` to final as moveFinalityWatch does and, when it watches a /proxy payment, marks
 * that payment's charge entry in the ledger final, in one statement (so one transaction and one
 * round trip). Returns whether the watch moved.
 */
export async function moveFinalityWatchToFinal(
  db: Db | Tx,
  id: bigint,
  set: { tx_hash: string; block_number: bigint | null; details: string; final_at: Date },
): Promise<boolean> {
  const states = allowedFrom<Finality>('finality watch', FINALITY_MOVES, 'final');
  const { rows } = await sql<{ id: bigint }>`
    with watch as (
      update finality_watches
        set finality = 'final', tx_hash = ${set.tx_hash}, block_number = ${set.block_number}::bigint,
            details = ${set.details}, final_at = ${set.final_at}, updated_at = now()
        where id = ${id} and finality in (${sql.join(states)})
        returning id, proxy_payment_id
    ), charge as (
      update credit_ledger l set finality = 'final'
        from watch w join proxy_payments p on p.id = w.proxy_payment_id
        where l.reference = p.reference and l.kind = 'charge'
    )
    select id from watch`.execute(db);
  return rows.length > 0;
}
