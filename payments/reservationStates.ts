/**
 * The moves of a credit reservation (credit_reservations.state), and the one function that writes
 * them. Every arrow below is in RESERVATION_MOVES and every move of RESERVATION_MOVES is an arrow
 * below (test/db/state-tables.test.ts); states joined by a bar are reached alike.
 *
 *   reserved -> charged | released
 *
 * A release gives the credits back to the organisation and takes them off the daily counters, in
 * the same statement: the database function settle_reservation (db/functions/) makes both moves,
 * from the same state as this table (the test exercises it from every state).
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../db/index';
import { firstRow } from '../db/rows';
import type { ReservationState } from '../db/schema';
import { allowedFrom, type MoveTable } from './states';

export const RESERVATION_MOVES = {
  reserved: ['charged', 'released'],
  charged: [],
  released: [],
} as const satisfies MoveTable<ReservationState>;

/** Moves the reservation `reference` to `to`, once; returns whether this call moved it. One statement. */
export async function moveReservation(db: Db | Tx, reference: string, to: ReservationState): Promise<boolean> {
  allowedFrom<ReservationState>('credit reservation', RESERVATION_MOVES, to);
  const { rows } = await sql<{
    settled: boolean;
  }>`select settle_reservation(${reference}::text, ${to}::text) as settled`.execute(db);
  return firstRow(rows, 'settle_reservation').settled;
}
