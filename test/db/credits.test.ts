import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { createTestAccount, type TestAccount } from '../support/accounts';
import {
  chargeReservation,
  organisationBalance,
  releaseReservation,
  reserveCredits,
  type ReservationRequest,
} from '../../payments/credits';
import { spentOn } from '../../payments/limits';
import type { Db } from '../../db/index';
import type { LedgerKind } from '../../db/schema';

let database: TestDatabase;
let db: Db;
beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await database.drop();
});

let counter = 0;
function request(
  account: TestAccount,
  credits: bigint,
  overrides: Partial<ReservationRequest> = {},
): ReservationRequest {
  counter += 1;
  return {
    reference: `test-${counter}-${Math.random()}`,
    organisationId: account.organisationId,
    accountId: account.accountId,
    apiKeyId: account.apiKeyId,
    keyDailyCapCredits: 1_000_000n,
    networkClass: 'testnet',
    day: '2026-11-21',
    credits,
    accountDailyLimitCredits: 1_000_000n,
    systemDailyLimitCredits: 1_000_000_000n,
    ...overrides,
  };
}

async function ledgerSums(organisationId: bigint): Promise<Record<Exclude<LedgerKind, 'purchase'>, bigint>> {
  const rows = await db
    .selectFrom('credit_ledger')
    .select(['kind', 'amount_credits'])
    .where('organisation_id', '=', organisationId)
    .execute();
  const sums: Record<Exclude<LedgerKind, 'purchase'>, bigint> = {
    grant: 0n,
    reserve: 0n,
    charge: 0n,
    release: 0n,
    refund: 0n,
  };
  for (const row of rows) if (row.kind !== 'purchase') sums[row.kind] += row.amount_credits;
  return sums;
}

describe('credit reservations', () => {
  it('50 concurrent reservations against credits for exactly 20: exactly 20 hold, the balance ends at 0', async () => {
    const account = await createTestAccount(db, { credits: 20n });
    const results = await Promise.all(Array.from({ length: 50 }, () => reserveCredits(db, request(account, 1n))));
    expect(results.filter((result) => result.reserved)).toHaveLength(20);
    expect(results.filter((result) => !result.reserved && result.reason === 'insufficient_credits')).toHaveLength(30);
    expect(await organisationBalance(db, account.organisationId)).toBe(0n);
    const sums = await ledgerSums(account.organisationId);
    expect(sums.grant - sums.reserve + sums.release + sums.refund).toBe(0n);
    expect(sums.reserve).toBe(20n);
  });

  it('charges or releases exactly once; a release gives back credits and daily counters', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const charged = request(account, 30n);
    const released = request(account, 25n);
    expect(await reserveCredits(db, charged)).toEqual({ reserved: true });
    expect(await reserveCredits(db, released)).toEqual({ reserved: true });
    expect(await organisationBalance(db, account.organisationId)).toBe(45n);
    const keySpend = {
      scope: 'api_key',
      scopeId: String(account.apiKeyId),
      networkClass: 'all',
      day: '2026-11-21',
    } as const;
    expect(await spentOn(db, keySpend)).toBe(55n);

    const [first, second] = await Promise.all([
      chargeReservation(db, charged.reference),
      chargeReservation(db, charged.reference),
    ]);
    expect([first, second].sort()).toEqual([false, true]);
    expect(await releaseReservation(db, charged.reference)).toBe(false); // already charged
    expect(await organisationBalance(db, account.organisationId)).toBe(45n);

    const releases = await Promise.all([
      releaseReservation(db, released.reference),
      releaseReservation(db, released.reference),
    ]);
    expect(releases.sort()).toEqual([false, true]);
    expect(await chargeReservation(db, released.reference)).toBe(false);
    expect(await organisationBalance(db, account.organisationId)).toBe(70n);
    expect(await spentOn(db, keySpend)).toBe(30n);
    expect(
      await spentOn(db, {
        scope: 'proxy_account',
        scopeId: String(account.accountId),
        networkClass: 'testnet',
        day: '2026-11-21',
      }),
    ).toBe(30n);

    const sums = await ledgerSums(account.organisationId);
    expect(sums).toEqual({ grant: 100n, reserve: 55n, charge: 30n, release: 25n, refund: 0n });
    expect(sums.grant - sums.reserve + sums.release).toBe(await organisationBalance(db, account.organisationId));
  });

  it.each([
    ['key_daily_cap', { keyDailyCapCredits: 10n }],
    ['account_daily_limit', { accountDailyLimitCredits: 10n }],
    ['system_daily_limit', { systemDailyLimitCredits: 10n }],
  ] as const)('refuses past the %s and changes nothing', async (reason, overrides) => {
    const account = await createTestAccount(db, { credits: 100n });
    const ok = await reserveCredits(
      db,
      request(account, 6n, { ...overrides, networkClass: 'mainnet', day: `2027-01-0${(counter % 9) + 1}` }),
    );
    expect(ok.reserved).toBe(true);
    const day = (
      await db.selectFrom('credit_reservations').select('day').orderBy('id', 'desc').executeTakeFirstOrThrow()
    ).day;
    const refused = await reserveCredits(db, request(account, 6n, { ...overrides, networkClass: 'mainnet', day }));
    expect(refused).toMatchObject({ reserved: false, reason, spentCredits: 6n, limitCredits: 10n });
    expect(await organisationBalance(db, account.organisationId)).toBe(94n);
    expect((await ledgerSums(account.organisationId)).reserve).toBe(6n);
  });
});
