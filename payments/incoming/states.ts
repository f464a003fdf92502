/**
 * The moves of a relay transaction (relay_transactions.state), and the one function that writes
 * them. Every arrow below is in RELAY_MOVES and every move of RELAY_MOVES is an arrow below
 * (test/db/state-tables.test.ts). States joined by a bar move alike: each of them may move to
 * the states after the arrow.
 *
 *   received -> settling -> settled -> delivered -> refund_pending -> refunded
 *   received | settling -> settle_failed
 *   settled | refund_failed -> refund_pending -> refund_failed
 *   refund_pending -> refund_pending
 *
 * settling with a client_tx_hash is broadcast with an unknown outcome: the chain is read before
 * anything else is tried. A refund row is written for a transaction already in refund_pending
 * (the refund job, after the relay decided to refund): that is the move of refund_pending onto
 * itself. refund_failed may be refunded again (the refund job retries, then an operator).
 * settle_failed and refunded are final.
 */
import { sql, type Selectable, type UpdateObject } from 'kysely';
import type { Database, Db, Tx } from '../../db/index';
import type { RelayTransactionState, RelayTransactionsTable } from '../../db/schema';
import { runPrepared } from '../../db/prepared';
import { allowedFrom, type FromOf, type MoveTable } from '../basics/states';

export const RELAY_MOVES = {
  received: ['settling', 'settle_failed'],
  settling: ['settled', 'settle_failed'],
  settled: ['delivered', 'refund_pending'],
  settle_failed: [],
  delivered: ['refund_pending'],
  refund_pending: ['refund_pending', 'refunded', 'refund_failed'],
  refunded: [],
  refund_failed: ['refund_pending'],
} as const satisfies MoveTable<RelayTransactionState>;

/** The columns a move writes beside the state (the state itself is the move's). */
export type RelayFields = Omit<UpdateObject<Database, 'relay_transactions'>, 'state'>;

/** Conditions beyond the state that some writes need. */
export interface RelayGuard {
  clientTxHashIsNull?: boolean;
  targetPaymentRefIsNull?: boolean;
  /** No webhook record was opened for the row (a move that would have to close one is not made). */
  webhookIdIsNull?: boolean;
}

function guarded(
  db: Db | Tx,
  id: bigint,
  states: readonly RelayTransactionState[],
  set: UpdateObject<Database, 'relay_transactions'>,
  guard: RelayGuard,
) {
  let query = db
    .updateTable('relay_transactions')
    .set({ ...set, updated_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('state', 'in', states);
  if (guard.clientTxHashIsNull) query = query.where('client_tx_hash', 'is', null);
  if (guard.targetPaymentRefIsNull) query = query.where('target_payment_ref', 'is', null);
  if (guard.webhookIdIsNull) query = query.where('webhook_id', 'is', null);
  return query;
}

/**
 * Moves relay transaction `id` to `to` from a state RELAY_MOVES allows (or from the narrower
 * `from` the caller names), with `set` and the extra `guard`, in one guarded update. Returns the
 * row as moved, or undefined when it was in no such state (someone else moved it first).
 */
export async function moveRelayTransaction<To extends RelayTransactionState>(
  db: Db | Tx,
  id: bigint,
  to: To,
  set: RelayFields = {},
  { from, guard = {} }: { from?: readonly FromOf<typeof RELAY_MOVES, To>[]; guard?: RelayGuard } = {},
): Promise<Selectable<RelayTransactionsTable> | undefined> {
  const states = allowedFrom<RelayTransactionState>('relay transaction', RELAY_MOVES, to, from);
  return guarded(db, id, states, { ...set, state: to }, guard)
    .returningAll()
    .executeTakeFirst();
}

/**
 * The same move, sent back with only `columns` of the row as moved, as a named prepared statement
 * (its text is fixed by the call site: the states, the columns set and returned, the guard).
 */
export async function moveRelayTransactionFor<To extends RelayTransactionState, C extends keyof RelayTransactionsTable>(
  db: Db | Tx,
  id: bigint,
  to: To,
  columns: readonly C[],
  set: RelayFields = {},
  { from, guard = {} }: { from?: readonly FromOf<typeof RELAY_MOVES, To>[]; guard?: RelayGuard } = {},
): Promise<Pick<Selectable<RelayTransactionsTable>, C> | undefined> {
  const states = allowedFrom<RelayTransactionState>('relay transaction', RELAY_MOVES, to, from);
  const query = guarded(db, id, states, { ...set, state: to }, guard).returning(columns);
  const { rows } = await runPrepared(db, query.compile());
  return rows[0] as Pick<Selectable<RelayTransactionsTable>, C> | undefined;
}

/**
 * The same move for a caller that needs only to know whether it was made (the paid call's own
 * steps): the row is not sent back, and the statement is a named prepared one (its text is fixed
 * by the call site: the states, the columns set and the guard).
 */
export async function relayTransactionMoved<To extends RelayTransactionState>(
  db: Db | Tx,
  id: bigint,
  to: To,
  set: RelayFields = {},
  {
    from,
    guard = {},
    withoutFlush = false,
  }: {
    from?: readonly FromOf<typeof RELAY_MOVES, To>[];
    guard?: RelayGuard;
    /**
     * Its transaction commits without waiting for the WAL flush (synchronous_commit off for that
     * transaction only): for a move that records what the chain already shows, which the follow
     * job makes again from the chain should a crash of the database lose it (docs/decisions.md).
     */
    withoutFlush?: boolean;
  } = {},
): Promise<boolean> {
  const states = allowedFrom<RelayTransactionState>('relay transaction', RELAY_MOVES, to, from);
  const moved = guarded(db, id, states, { ...set, state: to }, guard);
  const query = withoutFlush
    ? moved.returning(['id', sql<string>`set_config('synchronous_commit', 'off', true)`.as('commit')])
    : moved.returning('id');
  const { rows } = await runPrepared(db, query.compile());
  return rows.length > 0;
}

/**
 * Writes `set` while the row stays in one of `states` (and the extra `guard` holds); the state
 * itself never changes here, so every move goes through moveRelayTransaction. Returns whether the
 * row was written (a named prepared statement, as relayTransactionMoved).
 */
export async function updateRelayTransactionIn(
  db: Db | Tx,
  id: bigint,
  states: readonly RelayTransactionState[],
  set: RelayFields,
  guard: RelayGuard = {},
): Promise<boolean> {
  if ('state' in set) throw new Error('relay transaction: a state is written by moveRelayTransaction only');
  const { rows } = await runPrepared(db, guarded(db, id, states, set, guard).returning('id').compile());
  return rows.length > 0;
}
