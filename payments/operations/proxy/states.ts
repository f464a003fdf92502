/**
 * The moves of a proxy payment (proxy_payments.state), and the one function that writes them.
 * Every arrow below is in PROXY_MOVES and every move of PROXY_MOVES is an arrow below
 * (test/db/state-tables.test.ts); states joined by a bar move alike.
 *
 *   reserved -> signed -> charged
 *   reserved | signed -> released
 *
 *   reserved  credits held, the row written in the reservation's statement; nothing signed
 *   signed    the payment exists and may have reached the target: only the chain can tell now
 *   charged   the payment is on chain; the credits are spent
 *   released  the payment never went through (or was never sent); the credits are back
 *
 * The row is the reservation of the payment's credits: a move to charged spends them, a move to
 * released gives them back, and either ends the webhook record, all in one round trip: the database
 * functions charge_proxy_payment (charge_proxy_payment_used for an upto payment: charged what the
 * target settled, the rest given back) and release_proxy_payment
 * (db/functions/) make those two moves, from the same states as this table (the test exercises
 * them from every state).
 */
import { sql, type RawBuilder } from 'kysely';
import type { Db, Tx } from '../../../db/index';
import { firstRow } from '../../../db/rows';
import { runPrepared } from '../../../db/prepared';
import type { ProxyPaymentState } from '../../../db/schema';
import { allowedFrom, type MoveTable } from '../../basics/states';

export const PROXY_MOVES = {
  reserved: ['signed', 'released'],
  signed: ['charged', 'released'],
  charged: [],
  released: [],
} as const satisfies MoveTable<ProxyPaymentState>;

export type ProxyMove =
  | {
      to: 'signed';
      payer: string;
      payerSignature: string | null;
      validBefore: bigint | null;
      lastValidBlockHeight: bigint | null;
    }
  | {
      to: 'charged';
      txHash: string | null;
      outcome: string;
      /** upto: what the target settled and the credits charged for it (the rest of the reservation is released). */
      used?: { amountMicroUsdc: bigint; credits: bigint };
    }
  | { to: 'released'; outcome: string };

/**
 * Moves the proxy payment `reference` as `move` says, from a state PROXY_MOVES allows, once;
 * returns whether this call moved it.
 */
export async function moveProxyPayment(db: Db | Tx, reference: string, move: ProxyMove): Promise<boolean> {
  const states = allowedFrom<ProxyPaymentState>('proxy payment', PROXY_MOVES, move.to);
  switch (move.to) {
    case 'signed': {
      const result = await db
        .updateTable('proxy_payments')
        .set({
          state: 'signed',
          payer: move.payer,
          payer_signature: move.payerSignature,
          valid_before: move.validBefore,
          last_valid_block_height: move.lastValidBlockHeight,
          signed_at: sql`now()`,
        })
        .where('reference', '=', reference)
        .where('state', 'in', states)
        .executeTakeFirst();
      return result.numUpdatedRows > 0n;
    }
    case 'charged': {
      if (move.used !== undefined) {
        const { rows } = await sql<{ charged: boolean }>`
          select ${chargeUsedCall(reference, { ...move, used: move.used })} as charged`.execute(db);
        return firstRow(rows, 'charge_proxy_payment_used').charged;
      }
      const charge = sql<{ charged: boolean }>`
        select charge_proxy_payment(${reference}::text, ${move.txHash}::text, ${move.outcome}::text) as charged`;
      const { rows } = await runPrepared(db, charge.compile(db));
      return firstRow(rows, 'charge_proxy_payment').charged;
    }
    case 'released': {
      const { rows } = await sql<{ released: boolean }>`
        select ${releaseCall(reference, move.outcome)} as released`.execute(db);
      return firstRow(rows, 'release_proxy_payment').released;
    }
  }
}

/**
 * The call of charge_proxy_payment_used: charged for what was used, the rest of the hold released
 * (true when it moved the row). To select, alone or in another statement.
 */
export function chargeUsedCall(
  reference: string,
  move: { txHash: string | null; outcome: string; used: { amountMicroUsdc: bigint; credits: bigint } },
): RawBuilder<boolean> {
  return sql<boolean>`charge_proxy_payment_used(${reference}::text, ${move.txHash}::text, ${move.outcome}::text,
    ${move.used.amountMicroUsdc}::bigint, ${move.used.credits}::bigint)`;
}

/** The call of release_proxy_payment (true when it moved the row). To select, alone or in another statement. */
export function releaseCall(reference: string, outcome: string): RawBuilder<boolean> {
  return sql<boolean>`release_proxy_payment(${reference}::text, ${outcome}::text)`;
}
