// The credit ledger as /proxy moves it: credits held with the payment's row (holdProxyPayment,
// reserve_credits), charged once the payment is on chain (chargeProxyPayment) or released when
// it never will be (releaseProxyPayment).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPaymentChoice } from '../support/payments';
import { NO_POLICY } from '../../payments/accounts/policy';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { organisationBalance } from '../../payments/accounts/credits';
import { spentOn } from '../../payments/accounts/limits';
import {
  chargeProxyPayment,
  holdProxyPayment,
  releaseProxyPayment,
  type NewProxyPayment,
} from '../../payments/operations/proxy/records';
import type { PaymentChoice } from '../../payments/x402/choose';
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

function choiceOn(networkClass: 'mainnet' | 'testnet'): PaymentChoice {
  return testPaymentChoice({ network: networkClass === 'mainnet' ? 'base' : 'base-sepolia', amountMicroUsdc: 1_000n });
}

/** What the payment was signed with: the row is written as signed, as /proxy writes it before the payment leaves. */
const SIGNED = { payer: '0x2222222222222222222222222222222222222222', validBefore: 1_900_000_000n };

interface Limits {
  keyDailyCapCredits: bigint;
  accountDailyLimitCredits: bigint;
  systemDailyLimitCredits: bigint;
  networkClass: 'mainnet' | 'testnet';
  day: string;
}

let counter = 0;
function payment(account: TestAccount, credits: bigint, overrides: Partial<Limits> = {}): NewProxyPayment {
  counter += 1;
  const limits: Limits = {
    keyDailyCapCredits: 1_000_000n,
    networkClass: 'testnet',
    day: '2026-11-21',
    accountDailyLimitCredits: 1_000_000n,
    systemDailyLimitCredits: 1_000_000_000n,
    ...overrides,
  };
  return {
    reference: `0x${randomBytes(32).toString('hex')}`,
    key: { ...account, dailyCapCredits: limits.keyDailyCapCredits, policy: NO_POLICY },
    requestId: `req-${counter}`,
    targetUrl: 'http://target.test/paid',
    choice: choiceOn(limits.networkClass),
    credits,
    day: limits.day,
    accountDailyLimitCredits: limits.accountDailyLimitCredits,
    systemDailyLimitCredits: limits.systemDailyLimitCredits,
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
    const results = await Promise.all(
      Array.from({ length: 50 }, () => holdProxyPayment(db, payment(account, 1n), SIGNED)),
    );
    expect(results.filter((result) => result.ok)).toHaveLength(20);
    expect(results.filter((result) => !result.ok && result.reason === 'insufficient_credits')).toHaveLength(30);
    expect(await organisationBalance(db, account.organisationId)).toBe(0n);
    const sums = await ledgerSums(account.organisationId);
    expect(sums.grant - sums.reserve + sums.release + sums.refund).toBe(0n);
    expect(sums.reserve).toBe(20n);
  });

  it('charges or releases exactly once; a release gives back credits and daily counters', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const charged = payment(account, 30n);
    const released = payment(account, 25n);
    expect(await holdProxyPayment(db, charged, SIGNED)).toMatchObject({ ok: true });
    expect(await holdProxyPayment(db, released, SIGNED)).toMatchObject({ ok: true });
    expect(await organisationBalance(db, account.organisationId)).toBe(45n);
    const keySpend = {
      scope: 'api_key',
      scopeId: String(account.apiKeyId),
      networkClass: 'all',
      day: '2026-11-21',
    } as const;
    expect(await spentOn(db, keySpend)).toBe(55n);

    const onChain = { outcome: 'on chain' };
    const [first, second] = await Promise.all([
      chargeProxyPayment(db, charged.reference, onChain),
      chargeProxyPayment(db, charged.reference, onChain),
    ]);
    expect([first, second].sort()).toEqual([false, true]);
    expect(await releaseProxyPayment(db, charged.reference, { outcome: 'late' })).toBe(false); // already charged
    expect(await organisationBalance(db, account.organisationId)).toBe(45n);

    const expired = { outcome: 'expired unused' };
    const releases = await Promise.all([
      releaseProxyPayment(db, released.reference, expired),
      releaseProxyPayment(db, released.reference, expired),
    ]);
    expect(releases.sort()).toEqual([false, true]);
    expect(await chargeProxyPayment(db, released.reference, onChain)).toBe(false);
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
    const day = `2027-01-0${(counter % 9) + 1}`;
    const ok = await holdProxyPayment(db, payment(account, 6n, { ...overrides, networkClass: 'mainnet', day }));
    expect(ok.ok).toBe(true);
    const refused = await holdProxyPayment(db, payment(account, 6n, { ...overrides, networkClass: 'mainnet', day }));
    expect(refused).toMatchObject({ ok: false, reason, spentCredits: 6n, limitCredits: 10n });
    expect(await organisationBalance(db, account.organisationId)).toBe(94n);
    expect((await ledgerSums(account.organisationId)).reserve).toBe(6n);
  });
});
