/**
 * The credit ledger: every change of an organisation's balance is an append-only entry written in
 * the same transaction as the balance itself. The balance never goes negative (a check constraint
 * backs the guarded updates below). Invariant: balance = grants + refunds + releases - reserves.
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../db/index';
import { SYSTEM_SCOPE_ID, subtractSpend, tryAddSpend, type SpendKey } from './limits';

export async function grantCredits(db: Db, organisationId: bigint, credits: bigint, reference: string): Promise<bigint> {
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
  const row = await db.selectFrom('organisations').select('credit_balance').where('id', '=', organisationId).executeTakeFirst();
  return row?.credit_balance ?? 0n;
}

export type ReservationRefusal = 'insufficient_credits' | 'key_daily_cap' | 'account_daily_limit' | 'system_daily_limit';

export interface ReservationRequest {
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

export type ReservationResult =
  | { reserved: true }
  | { reserved: false; reason: ReservationRefusal; spentCredits: bigint; limitCredits: bigint; balanceCredits: bigint };

class Refused extends Error {
  constructor(readonly result: Extract<ReservationResult, { reserved: false }>) {
    super(result.reason);
  }
}

function spendKeys(request: Pick<ReservationRequest, 'apiKeyId' | 'accountId' | 'networkClass' | 'day'>) {
  return {
    key: { scope: 'api_key', scopeId: String(request.apiKeyId), networkClass: 'all', day: request.day } as const,
    account: { scope: 'proxy_account', scopeId: String(request.accountId), networkClass: request.networkClass, day: request.day } as const,
    system: { scope: 'proxy_system', scopeId: SYSTEM_SCOPE_ID, networkClass: request.networkClass, day: request.day } as const,
  };
}

/**
 * Holds credits for a payment in one transaction: the organisation balance, the key's daily cap,
 * the account's and the system's daily proxy limits of the network class. Either every counter
 * moves or none does; concurrent reservations can never overdraw or overshoot. `recordWith` runs
 * inside that transaction once the credits are held, for the row that says what they are held for.
 */
export async function reserveCredits(
  db: Db,
  request: ReservationRequest,
  options: { recordWith?: (tx: Tx) => Promise<void> } = {},
): Promise<ReservationResult> {
  if (request.credits <= 0n) throw new RangeError('a reservation must be positive');
  try {
    return await db.transaction().execute(async (tx) => {
      // The organisation row is locked first by every reservation, so counters are taken in one order.
      const debited = await tx
        .updateTable('organisations')
        .set({ credit_balance: sql<bigint>`credit_balance - ${request.credits}` })
        .where('id', '=', request.organisationId)
        .where('credit_balance', '>=', request.credits)
        .returning('credit_balance')
        .executeTakeFirst();
      if (!debited) {
        const balance = await organisationBalance(tx, request.organisationId);
        throw new Refused({ reserved: false, reason: 'insufficient_credits', spentCredits: 0n, limitCredits: balance, balanceCredits: balance });
      }
      const keys = spendKeys(request);
      const checks: Array<[SpendKey, bigint, ReservationRefusal]> = [
        [keys.key, request.keyDailyCapCredits, 'key_daily_cap'],
        [keys.account, request.accountDailyLimitCredits, 'account_daily_limit'],
        [keys.system, request.systemDailyLimitCredits, 'system_daily_limit'],
      ];
      for (const [key, limit, reason] of checks) {
        const spend = await tryAddSpend(tx, key, request.credits, limit);
        if (!spend.admitted) {
          throw new Refused({ reserved: false, reason, spentCredits: spend.spent, limitCredits: limit, balanceCredits: debited.credit_balance + request.credits });
        }
      }
      await tx
        .insertInto('credit_reservations')
        .values({
          reference: request.reference,
          organisation_id: request.organisationId,
          account_id: request.accountId,
          api_key_id: request.apiKeyId,
          network_class: request.networkClass,
          day: request.day,
          credits: request.credits,
        })
        .execute();
      await tx
        .insertInto('credit_ledger')
        .values({
          organisation_id: request.organisationId,
          account_id: request.accountId,
          api_key_id: request.apiKeyId,
          kind: 'reserve',
          amount_credits: request.credits,
          reference: request.reference,
        })
        .execute();
      if (options.recordWith) await options.recordWith(tx);
      return { reserved: true } as const;
    });
  } catch (error) {
    if (error instanceof Refused) return error.result;
    throw error;
  }
}

async function settleReservation(tx: Tx, reference: string, to: 'charged' | 'released') {
  return tx
    .updateTable('credit_reservations')
    .set({ state: to, settled_at: sql`now()` })
    .where('reference', '=', reference)
    .where('state', '=', 'reserved')
    .returningAll()
    .executeTakeFirst();
}

type Reservation = NonNullable<Awaited<ReturnType<typeof settleReservation>>>;

/** The ledger entry that closes a reservation, with its reference. */
async function appendSettlement(tx: Tx, reservation: Reservation, kind: 'charge' | 'release'): Promise<void> {
  await tx
    .insertInto('credit_ledger')
    .values({
      organisation_id: reservation.organisation_id,
      account_id: reservation.account_id,
      api_key_id: reservation.api_key_id,
      kind,
      amount_credits: reservation.credits,
      reference: reservation.reference,
    })
    .execute();
}

/** The payment went through: the held credits are spent. Returns false when already settled. */
export async function chargeReservation(db: Db | Tx, reference: string): Promise<boolean> {
  const run = async (tx: Tx) => {
    const reservation = await settleReservation(tx, reference, 'charged');
    if (!reservation) return false;
    await appendSettlement(tx, reservation, 'charge');
    return true;
  };
  return db.isTransaction ? run(db as Tx) : (db as Db).transaction().execute(run);
}

/** The payment did not go through: the credits come back and the daily counters are taken back. */
export async function releaseReservation(db: Db | Tx, reference: string): Promise<boolean> {
  const run = async (tx: Tx) => {
    const reservation = await settleReservation(tx, reference, 'released');
    if (!reservation) return false;
    await tx
      .updateTable('organisations')
      .set({ credit_balance: sql<bigint>`credit_balance + ${reservation.credits}` })
      .where('id', '=', reservation.organisation_id)
      .execute();
    const keys = spendKeys({
      apiKeyId: reservation.api_key_id,
      accountId: reservation.account_id,
      networkClass: reservation.network_class,
      day: reservation.day,
    });
    for (const key of [keys.key, keys.account, keys.system]) await subtractSpend(tx, key, reservation.credits);
    await appendSettlement(tx, reservation, 'release');
    return true;
  };
  return db.isTransaction ? run(db as Tx) : (db as Db).transaction().execute(run);
}
