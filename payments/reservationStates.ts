/**
 * The moves of a credit reservation (credit_reservations.state). Every arrow below is in
 * RESERVATION_MOVES and every move of RESERVATION_MOVES is an arrow below
 * (test/db/state-tables.test.ts); states joined by a bar are reached alike.
 *
 *   reserved -> charged | released
 *
 * The one function that writes them is the database function settle_reservation (db/functions/),
 * which charge_proxy_payment and release_proxy_payment call with their payment's move: a release
 * gives the credits back to the organisation and takes them off the daily counters in the same
 * statement. It moves from the same state as this table (the test exercises it from every state).
 */
import type { ReservationState } from '../db/schema';
import type { MoveTable } from './states';

export const RESERVATION_MOVES = {
  reserved: ['charged', 'released'],
  charged: [],
  released: [],
} as const satisfies MoveTable<ReservationState>;
