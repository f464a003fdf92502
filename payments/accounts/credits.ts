/**
 * The credit ledger: every change of an organisation's balance is an append-only entry written in
 * the same transaction as the balance itself. The balance never goes negative (a check constraint
 * backs the guarded updates below). Invariant: balance = grants + refunds + releases - reserves.
 */
import { sql, type RawBuilder } from 'kysely';
import type { Db, Tx } from '../../db/index';
import { fail, ok, type Failure, type Ok } from '../basics/result';

export async function grantCredits(
  db: Db,
  organisationId: bigint,
  credits: bigint,
  reference: string,
): Promise<bigint> {
  if (credits <= 0n) throw new RangeError('a grant must be positive');
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .updateTable('organisations')
      .set({ credit_balance: sql<bigint>`credit_balance + ${credits}` })
      .where('id', '=', organisationId)
      .returning('credit_balance')
      .executeTakeFirst();
    if (!row) throw new RangeError(`no organisation ${organisationId}`);
    await tx
      .insertInto('credit_ledger')
      .values({ organisation_id: organisationId, kind: 'grant', amount_credits: credits, reference })
      .execute();
    return row.credit_balance;
  });
}

export async function organisationBalance(db: Db | Tx, organisationId: bigint): Promise<bigint> {
  const row = await db
    .selectFrom('organisations')
    .select('credit_balance')
    .where('id', '=', organisationId)
    .executeTakeFirst();
  return row?.credit_balance ?? 0n;
}

export type ReservationRefusal =
  'insufficient_credits' | 'key_daily_cap' | 'account_daily_limit' | 'system_daily_limit';

interface ReservationRequest {
  reference: string;
  organisationId: bigint;
  accountId: bigint;
  apiKeyId: bigint;
  keyDailyCapCredits: bigint;
  networkClass: 'mainnet' | 'testnet';
  day: string;
  credits: bigint;
  accountDailyLimitCredits: bigint;
  systemDailyLimitCredits: bigint;
}

/** A refused reservation: the counter that refused (or the balance), with its figures. */
export type ReservationRefused = Failure<ReservationRefusal> & {
  spentCredits: bigint;
  limitCredits: bigint;
  balanceCredits: bigint;
};

export type ReservationResult = Ok<true> | ReservationRefused;

export interface ReservationRow {
  reserved: boolean;
  reason: ReservationRefusal | null;
  spent_credits: bigint | null;
  limit_credits: bigint | null;
  balance_credits: bigint | null;
}

/**
 * The call of reserve_credits (db/functions/reserve_credits.sql) for `request`, to select from;
 * its columns are those of ReservationRow. It holds credits for a payment in one statement: the
 * organisation balance, the key's daily cap, the account's and the system's daily proxy limits of
 * the network class. Either every counter moves or none does; concurrent reservations can never
 * overdraw or overshoot; a refusal reports the counter that refused (or the balance). The proxy
 * payment row is written in the same statement (holdProxyPayment selects from it in a CTE); the
 * reservation is charged or released with its payment (charge_proxy_payment,
 * release_proxy_payment).
 */
export function reserveCreditsCall(request: ReservationRequest): RawBuilder<ReservationRow> {
  if (request.credits <= 0n) throw new RangeError('a reservation must be positive');
  return sql<ReservationRow>`reserve_credits(
    ${request.reference}::text,
    ${request.organisationId}::bigint,
    ${request.accountId}::bigint,
    ${request.apiKeyId}::bigint,
    ${request.keyDailyCapCredits}::bigint,
    ${request.networkClass}::text,
    ${request.day}::date,
    ${request.credits}::bigint,
    ${request.accountDailyLimitCredits}::bigint,
    ${request.systemDailyLimitCredits}::bigint)`;
}

export function reservationResultOf(row: ReservationRow): ReservationResult {
  if (row.reserved) return ok(true);
  const { reason, spent_credits, limit_credits, balance_credits } = row;
  // reserve_credits fills every column of a refusal; a null is a broken function, not a refusal.
  if (reason === null || spent_credits === null || limit_credits === null || balance_credits === null)
    throw new Error(`reserve_credits refused without its figures: ${JSON.stringify({ reason })}`);
  return {
    ...fail(reason, `${reason}: ${spent_credits} of ${limit_credits} credits used, ${balance_credits} left`),
    spentCredits: spent_credits,
    limitCredits: limit_credits,
    balanceCredits: balance_credits,
  };
}
