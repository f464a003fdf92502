/**
 * The moves of a finality watch (finality_watches.finality), and the one function that writes them.
 * Every arrow below is in FINALITY_MOVES and every move of FINALITY_MOVES is an arrow below
 * (test/db/state-tables.test.ts).
 *
 *   pending -> pending | final | lost
 *
 *   pending  the transaction is settled (in a block, or sent again after a reorg dropped it), not final
 *   final    its block is at the network's finality rule (payments/basics/networkTable.ts)
 *   lost     the chain dropped it and it can no longer land: the amount is at risk
 *
 * pending moves onto itself when the transaction watched changes (sent again, or found in another
 * transaction of the same transfer). final and lost are final.
 */
import { sql, type Selectable, type UpdateObject } from 'kysely';
import type { Database, Db, Tx } from '../../db/index';
import type { Finality, FinalityWatchesTable } from '../../db/schema';
import { allowedFrom, type MoveTable } from '../basics/states';

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

/** A watch found final: what its row records. */
export interface FinalMove {
  id: bigint;
  tx_hash: string;
  block_number: bigint;
  details: string;
  final_at: Date;
}

/**
 * Moves watches to final as moveFinalityWatch does (a guarded update from the states
 * FINALITY_MOVES allows) and marks the charge entry of each watched /proxy payment in the ledger
 * final, every watch of `moves` in one statement (so one transaction and one round trip). Returns
 * the ids of the watches that moved.
 */
export async function moveFinalityWatchesToFinal(db: Db | Tx, moves: readonly FinalMove[]): Promise<bigint[]> {
  if (moves.length === 0) return [];
  const states = allowedFrom<Finality>('finality watch', FINALITY_MOVES, 'final');
  const array = (values: Array<string | bigint | Date>, type: 'bigint' | 'text' | 'timestamptz') =>
    sql`${values.map((value) => (value instanceof Date ? value.toISOString() : String(value)))}::${sql.raw(type)}[]`;
  const ids = array(
    moves.map((move) => move.id),
    'bigint',
  );
  const hashes = array(
    moves.map((move) => move.tx_hash),
    'text',
  );
  const blocks = array(
    moves.map((move) => move.block_number),
    'bigint',
  );
  const details = array(
    moves.map((move) => move.details),
    'text',
  );
  const finalAt = array(
    moves.map((move) => move.final_at),
    'timestamptz',
  );
  const { rows } = await sql<{ id: bigint }>`
    with found as (
      select * from unnest(${ids}, ${hashes}, ${blocks}, ${details}, ${finalAt}) as f(id, tx_hash, block_number, details, final_at)
    ), watch as (
      update finality_watches w
        set finality = 'final', tx_hash = f.tx_hash, block_number = f.block_number, details = f.details,
            final_at = f.final_at, updated_at = now()
        from found f
        where w.id = f.id and w.finality in (${sql.join(states)})
        returning w.id, w.proxy_payment_id
    ), charge as (
      update credit_ledger l set finality = 'final'
        from watch w join proxy_payments p on p.id = w.proxy_payment_id
        where l.reference = p.reference and l.kind = 'charge'
    )
    select id from watch`.execute(db);
  return rows.map((row) => row.id);
}
