// The proxy payment rows and the credit rules behind them (database functions of db/functions/):
// all-or-nothing refusals by a later counter after an earlier one admitted, the figures a refusal
// reports, one round trip per step of a paid call, once-only settlement, and the webhook record
// as the TypeScript side wrote it before.
import { randomBytes } from 'node:crypto';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPaymentChoice } from '../support/payments';
import type { Database, Db, Tx } from '../../db/index';
import {
  organisationBalance,
  reservationResultOf,
  reserveCreditsCall,
  type ReservationRow,
} from '../../payments/accounts/credits';
import { spentOn, type SpendKey } from '../../payments/accounts/limits';
import { usdcText } from '../../payments/basics/money';
import {
  chargeProxyPayment,
  findProxyPayment,
  holdProxyPayment,
  releaseProxyPayment,
  signedRecordOf,
  signedTargetPaymentOf,
  watchProxyPayment,
  type NewProxyPayment,
} from '../../payments/operations/proxy/records';
import type { PaymentChoice } from '../../payments/x402/choose';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { NO_POLICY } from '../../payments/accounts/policy';

let database: TestDatabase;
let db: Db;
/** The same pool, through a Kysely that counts every statement it sends (BEGIN and COMMIT included). */
let counted: Db;
let statements: string[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
  counted = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: database.handle.pool }),
    log: (event) => {
      statements.push(event.query.sql);
    },
  });
});
afterAll(async () => {
  // `counted` shares the handle's pool, which drop() ends.
  await database.drop();
});

async function roundTrips<T>(run: () => Promise<T>): Promise<{ value: T; count: number; sql: string[] }> {
  statements = [];
  const value = await run();
  return { value, count: statements.length, sql: statements };
}

let counter = 0;
function nextDay(): string {
  counter += 1;
  return `2028-0${(counter % 9) + 1}-${String((counter % 28) + 1).padStart(2, '0')}`;
}

function reference(): string {
  return `0x${randomBytes(32).toString('hex')}`;
}

interface Limits {
  day: string;
  keyDailyCapCredits: bigint;
  accountDailyLimitCredits: bigint;
  systemDailyLimitCredits: bigint;
}

/** A payment of `credits` held under these limits, on 2028-01-01 unless a day is given. */
function request(account: TestAccount, credits: bigint, overrides: Partial<Limits> = {}): NewProxyPayment {
  const limits: Limits = {
    day: '2028-01-01',
    keyDailyCapCredits: 1_000_000n,
    accountDailyLimitCredits: 1_000_000n,
    systemDailyLimitCredits: 1_000_000_000n,
    ...overrides,
  };
  return newPayment(account, credits, {
    key: { ...account, dailyCapCredits: limits.keyDailyCapCredits, policy: NO_POLICY },
    day: limits.day,
    accountDailyLimitCredits: limits.accountDailyLimitCredits,
    systemDailyLimitCredits: limits.systemDailyLimitCredits,
  });
}

function counters(
  account: TestAccount,
  day: string,
  networkClass: 'mainnet' | 'testnet' = 'testnet',
): Record<'key' | 'account' | 'system', SpendKey> {
  return {
    key: { scope: 'api_key', scopeId: String(account.apiKeyId), networkClass: 'all', day },
    account: { scope: 'proxy_account', scopeId: String(account.accountId), networkClass, day },
    system: { scope: 'proxy_system', scopeId: 'system', networkClass, day },
  };
}

async function snapshot(account: TestAccount, day: string) {
  const keys = counters(account, day);
  const ledger = await db
    .selectFrom('credit_ledger')
    .select(['kind', 'amount_credits', 'reference'])
    .where('organisation_id', '=', account.organisationId)
    .orderBy('id')
    .execute();
  const payments = await db
    .selectFrom('proxy_payments')
    .select(['reference', 'state', 'credits', 'network_class', 'spend_day'])
    .where('organisation_id', '=', account.organisationId)
    .orderBy('id')
    .execute();
  return {
    balance: await organisationBalance(db, account.organisationId),
    key: await spentOn(db, keys.key),
    account: await spentOn(db, keys.account),
    system: await spentOn(db, keys.system),
    ledger,
    payments,
  };
}

const CHOICE: PaymentChoice = testPaymentChoice();

function newPayment(account: TestAccount, credits: bigint, overrides: Partial<NewProxyPayment> = {}): NewProxyPayment {
  return {
    reference: reference(),
    key: { ...account, dailyCapCredits: 1_000_000n, policy: NO_POLICY },
    requestId: 'req-1',
    targetUrl: 'http://target.test/paid',
    choice: CHOICE,
    credits,
    day: nextDay(),
    accountDailyLimitCredits: 1_000_000n,
    systemDailyLimitCredits: 1_000_000_000n,
    ...overrides,
  };
}

const SIGNED = { payer: '0x2222222222222222222222222222222222222222', validBefore: 1_900_000_000n };

describe('reserve_credits: all or nothing', () => {
  /** As /proxy holds a payment: signed first, held with its row in one statement. */
  const hold = (payment: NewProxyPayment) => holdProxyPayment(db, payment, SIGNED);

  it('a refusal by the account limit after the key cap admitted leaves the key counter, balance and ledger unchanged', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const day = nextDay();
    expect(
      await hold(request(account, 6n, { day, accountDailyLimitCredits: 10n, keyDailyCapCredits: 50n })),
    ).toMatchObject({ ok: true });
    const before = await snapshot(account, day);
    expect(before).toMatchObject({ balance: 94n, key: 6n, account: 6n, system: 6n });

    const refused = await hold(request(account, 6n, { day, accountDailyLimitCredits: 10n, keyDailyCapCredits: 50n }));
    expect(refused).toMatchObject({
      ok: false,
      reason: 'account_daily_limit',
      spentCredits: 6n,
      limitCredits: 10n,
      balanceCredits: 94n,
    });
    expect(await snapshot(account, day)).toEqual(before);
  });

  it('a refusal by the system limit after key and account admitted moves neither back nor forth', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const day = nextDay();
    // The system counter of this day already holds 95 of 100 from other accounts.
    const other = await createTestAccount(db, { credits: 1_000n });
    expect(await hold(request(other, 95n, { day, systemDailyLimitCredits: 100n }))).toMatchObject({
      ok: true,
    });
    const before = await snapshot(account, day);
    expect(before).toMatchObject({ balance: 100n, key: 0n, account: 0n, system: 95n, ledger: [{ kind: 'grant' }] });

    const refused = await hold(request(account, 6n, { day, systemDailyLimitCredits: 100n }));
    expect(refused).toMatchObject({
      ok: false,
      reason: 'system_daily_limit',
      spentCredits: 95n,
      limitCredits: 100n,
      balanceCredits: 100n,
    });
    const after = await snapshot(account, day);
    expect(after).toEqual(before);
    // The counters that admitted were rolled back, not left at zero-value rows: none was written.
    const rows = await db
      .selectFrom('daily_spend')
      .selectAll()
      .where('day', '=', day)
      .where('scope', 'in', ['api_key', 'proxy_account'])
      .where('scope_id', 'in', [String(account.apiKeyId), String(account.accountId)])
      .execute();
    expect(rows).toEqual([]);
  });

  it('a key cap smaller than the request refuses with the counter as it stands (zero when there is none)', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const day = nextDay();
    const refused = await hold(request(account, 6n, { day, keyDailyCapCredits: 5n }));
    expect(refused).toMatchObject({
      ok: false,
      reason: 'key_daily_cap',
      spentCredits: 0n,
      limitCredits: 5n,
      balanceCredits: 100n,
    });
    expect(await snapshot(account, day)).toMatchObject({
      balance: 100n,
      key: 0n,
      account: 0n,
      system: 0n,
      payments: [],
    });
  });

  it('insufficient credits: the balance as both limit and balance, nothing spent, nothing written', async () => {
    const account = await createTestAccount(db, { credits: 5n });
    const day = nextDay();
    const refused = await hold(request(account, 6n, { day }));
    expect(refused).toMatchObject({
      ok: false,
      reason: 'insufficient_credits',
      spentCredits: 0n,
      limitCredits: 5n,
      balanceCredits: 5n,
    });
    expect(await snapshot(account, day)).toMatchObject({
      balance: 5n,
      key: 0n,
      account: 0n,
      system: 0n,
      payments: [],
    });
  });

  it('30 at once against an account limit for 10: exactly 10 hold; refusals leave no trace on the key, balance or ledger', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const day = nextDay();
    const results = await Promise.all(
      Array.from({ length: 30 }, () =>
        hold(request(account, 3n, { day, accountDailyLimitCredits: 30n, keyDailyCapCredits: 1_000n })),
      ),
    );
    expect(results.filter((result) => result.ok)).toHaveLength(10);
    for (const result of results) {
      if (!result.ok)
        expect(result).toMatchObject({ reason: 'account_daily_limit', spentCredits: 30n, limitCredits: 30n });
    }
    const after = await snapshot(account, day);
    expect(after).toMatchObject({ balance: 970n, key: 30n, account: 30n, system: 30n });
    expect(after.ledger.filter((entry) => entry.kind === 'reserve')).toHaveLength(10);
    expect(after.payments).toHaveLength(10);
  });

  it('a reservation must be positive', async () => {
    const account = await createTestAccount(db, { credits: 5n });
    await expect(hold(request(account, 0n))).rejects.toThrow(RangeError);
  });
});

describe('proxy payment rows: one round trip per step', () => {
  it('a payment signed beforehand is held and recorded as signed in one statement', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 13n);
    const held = await roundTrips(() => holdProxyPayment(counted, payment, SIGNED));
    expect(held.count).toBe(1);
    if (!held.value.ok) throw new Error('not reserved');
    const row = (await findProxyPayment(db, held.value.value.id))!;
    expect(row.state).toBe('signed');
    expect(row.signed_at).toBeInstanceOf(Date);
    expect(signedTargetPaymentOf(row)).toEqual(
      signedTargetPaymentOf(signedRecordOf(held.value.value.id, payment.reference, CHOICE, SIGNED)),
    );
    expect(row).toMatchObject({ credits: 13n, network_class: 'testnet', spend_day: payment.day });
    expect(await chargeProxyPayment(db, payment.reference, { txHash: '0xabc', outcome: 'on chain' })).toBe(true);
    expect((await snapshot(account, payment.day)).balance).toBe(87n);
  });

  it('a refused reservation writes no row, signed or not', async () => {
    const account = await createTestAccount(db, { credits: 5n });
    const payment = newPayment(account, 13n);
    const refused = await holdProxyPayment(db, payment, SIGNED);
    expect(refused).toMatchObject({ ok: false, reason: 'insufficient_credits' });
    expect(
      await db.selectFrom('proxy_payments').select('id').where('reference', '=', payment.reference).execute(),
    ).toEqual([]);
  });

  it('hold (the reservation with the signed row), charge: one statement each; the row read back is what settleNow builds in memory', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 13n);

    const held = await roundTrips(() => holdProxyPayment(counted, payment, SIGNED));
    expect(held.count).toBe(1);
    if (!held.value.ok) throw new Error('not reserved');
    const row = await findProxyPayment(db, held.value.value.id);
    expect(row).toMatchObject({
      reference: payment.reference,
      state: 'signed',
      organisation_id: account.organisationId,
      account_id: account.accountId,
      api_key_id: account.apiKeyId,
      request_id: 'req-1',
      target_url: 'http://target.test/paid',
      network: 'base-sepolia',
      chain_type: 'evm',
      pay_to: CHOICE.requirements.payTo,
      amount_micro_usdc: 12_345n,
      credits: 13n,
      network_class: 'testnet',
      spend_day: payment.day,
    });

    expect(signedTargetPaymentOf(signedRecordOf(held.value.value.id, payment.reference, CHOICE, SIGNED))).toEqual(
      signedTargetPaymentOf(row!),
    );

    const charged = await roundTrips(() =>
      chargeProxyPayment(counted, payment.reference, { txHash: '0xabc', outcome: 'on chain' }),
    );
    expect(charged).toMatchObject({ value: true, count: 1 });
    expect(await findProxyPayment(db, held.value.value.id)).toMatchObject({
      state: 'charged',
      tx_hash: '0xabc',
      outcome: 'on chain',
    });
    const after = await snapshot(account, payment.day);
    expect(after.balance).toBe(87n);
    expect(after.ledger.map((entry) => [entry.kind, entry.amount_credits])).toEqual([
      ['grant', 100n],
      ['reserve', 13n],
      ['charge', 13n],
    ]);
    expect(after.payments).toEqual([
      {
        reference: payment.reference,
        state: 'charged',
        credits: 13n,
        network_class: 'testnet',
        spend_day: payment.day,
      },
    ]);
  });

  it('a Solana payment read back equals the one built in memory', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const choice: PaymentChoice = {
      ...CHOICE,
      network: 'solana-devnet',
      chainType: 'solana',
      requirements: { ...CHOICE.requirements, network: 'solana-devnet' },
    };
    const payment = newPayment(account, 13n, { choice });
    const facts = {
      payer: 'So1anaPayer1111111111111111111111111111111',
      payerSignature: '5sig',
      lastValidBlockHeight: 123_456n,
      validBefore: null,
    };
    const held = await holdProxyPayment(db, payment, facts);
    if (!held.ok) throw new Error('not reserved');
    const row = (await findProxyPayment(db, held.value.id))!;
    expect(signedTargetPaymentOf(signedRecordOf(held.value.id, payment.reference, choice, facts))).toEqual(
      signedTargetPaymentOf(row),
    );
  });

  it('a refused reservation writes no row, in one round trip', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 13n, { accountDailyLimitCredits: 12n });
    const refused = await roundTrips(() => holdProxyPayment(counted, payment, SIGNED));
    expect(refused).toMatchObject({
      count: 1,
      value: {
        ok: false,
        reason: 'account_daily_limit',
        spentCredits: 0n,
        limitCredits: 12n,
        balanceCredits: 100n,
      },
    });
    expect(await snapshot(account, payment.day)).toMatchObject({
      balance: 100n,
      key: 0n,
      payments: [],
    });
    // The figures are the ones reserve_credits reports for the same request on its own.
    const { rows } = await sql<ReservationRow>`select * from ${reserveCreditsCall({
      reference: reference(),
      organisationId: account.organisationId,
      accountId: account.accountId,
      apiKeyId: account.apiKeyId,
      keyDailyCapCredits: payment.key.dailyCapCredits,
      networkClass: 'testnet',
      day: payment.day,
      credits: 13n,
      accountDailyLimitCredits: 12n,
      systemDailyLimitCredits: payment.systemDailyLimitCredits,
    })}`.execute(db);
    expect(reservationResultOf(rows[0]!)).toEqual(refused.value);
  });

  it('a reference used twice is an error and leaves the first reservation alone', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 13n);
    expect(await holdProxyPayment(db, payment, SIGNED)).toMatchObject({ ok: true });
    await expect(holdProxyPayment(db, payment, SIGNED)).rejects.toThrow(/duplicate key/);
    expect(await snapshot(account, payment.day)).toMatchObject({
      balance: 87n,
      key: 13n,
      payments: [{ state: 'signed' }],
    });
  });
});

describe('charge and release: once only, with the webhook record', () => {
  async function signedPayment(account: TestAccount, credits = 13n) {
    const payment = newPayment(account, credits);
    const held = await holdProxyPayment(db, payment, SIGNED);
    if (!held.ok) throw new Error('not reserved');
    return { payment, id: held.value.id };
  }

  it('charges once when two charges race; a release after it does nothing; the record says success as before', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const { payment, id } = await signedPayment(account);
    const { webhookId } = await watchProxyPayment(db, payment.reference, {
      openRecord: true,
      reportedTxHash: '0xreported',
    });
    const results = await Promise.all([
      chargeProxyPayment(db, payment.reference, { outcome: 'first' }),
      chargeProxyPayment(db, payment.reference, { outcome: 'second' }),
    ]);
    expect(results.sort()).toEqual([false, true]);
    expect(await releaseProxyPayment(db, payment.reference, { outcome: 'late' })).toBe(false);
    // Without a transaction hash in the call, the one recorded before stays.
    expect(await findProxyPayment(db, id)).toMatchObject({ state: 'charged', tx_hash: '0xreported' });
    const record = await db.selectFrom('webhooks').selectAll().where('id', '=', webhookId!).executeTakeFirstOrThrow();
    expect(record).toMatchObject({
      status: 'success',
      tx_hash: '0xreported',
      network: 'base-sepolia',
      message: `Payment of ${usdcText(12_345n)} to the target confirmed on-chain; 13 credits charged`,
      error: null,
    });
    expect(record.message).toBe('Payment of 0.012345 USDC to the target confirmed on-chain; 13 credits charged');
    const after = await snapshot(account, payment.day);
    expect(after.ledger.map((entry) => entry.kind)).toEqual(['grant', 'reserve', 'charge']);
    expect(after).toMatchObject({ balance: 87n, key: 13n });
  });

  it('a charge commits without waiting for its WAL flush (the chain holds what it records); a hold waits', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const flushRule = (tx: Db | Tx) =>
      sql<{ setting: string }>`select current_setting('synchronous_commit') as setting`
        .execute(tx)
        .then(({ rows }) => rows[0]?.setting);
    // The hold, in the caller's transaction as a claim under an idempotency record runs it.
    const held = await db.transaction().execute(async (tx) => {
      const before = await flushRule(tx);
      await sql`select * from ${reserveCreditsCall({
        reference: reference(),
        organisationId: account.organisationId,
        accountId: account.accountId,
        apiKeyId: account.apiKeyId,
        keyDailyCapCredits: 1_000n,
        networkClass: 'testnet',
        day: nextDay(),
        credits: 5n,
        accountDailyLimitCredits: 1_000n,
        systemDailyLimitCredits: 1_000n,
      })}`.execute(tx);
      return { before, after: await flushRule(tx) };
    });
    expect(held).toEqual({ before: 'on', after: 'on' });
    const { payment } = await signedPayment(account);
    const charged = await db.transaction().execute(async (tx) => {
      const { rows } = await sql<{ charged: boolean }>`
        select charge_proxy_payment(${payment.reference}::text, '0xcharged', 'settled') as charged`.execute(tx);
      return { charged: rows[0]?.charged, after: await flushRule(tx) };
    });
    expect(charged).toEqual({ charged: true, after: 'off' });
    // Only that transaction: the next one flushes as before.
    expect(await db.transaction().execute(flushRule)).toBe('on');
  });

  it('amounts in the record are shown as usdcText shows them', async () => {
    const account = await createTestAccount(db, { credits: 1_000_000n });
    for (const amount of [1n, 10n, 1_000n, 1_000_000n, 1_500_000n, 123_456_789_012n]) {
      const payment = newPayment(account, 13n, { choice: { ...CHOICE, amountMicroUsdc: amount } });
      expect(await holdProxyPayment(db, payment, SIGNED)).toMatchObject({ ok: true });
      const { webhookId } = await watchProxyPayment(db, payment.reference, { openRecord: true });
      expect(await chargeProxyPayment(db, payment.reference, { txHash: '0xdef', outcome: 'on chain' })).toBe(true);
      const record = await db
        .selectFrom('webhooks')
        .select(['message', 'tx_hash'])
        .where('id', '=', webhookId!)
        .executeTakeFirstOrThrow();
      expect(record).toEqual({
        message: `Payment of ${usdcText(amount)} to the target confirmed on-chain; 13 credits charged`,
        tx_hash: '0xdef',
      });
    }
  });

  it('a release gives back credits and counters once, in one round trip; the record says payment_failed as before', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const { payment, id } = await signedPayment(account, 20n);
    const { webhookId } = await watchProxyPayment(db, payment.reference, {
      openRecord: true,
      reportedTxHash: '0xseen',
    });
    const released = await roundTrips(() =>
      releaseProxyPayment(counted, payment.reference, { outcome: 'expired unused' }),
    );
    expect(released).toMatchObject({ value: true, count: 1 });
    expect(await releaseProxyPayment(db, payment.reference, { outcome: 'again' })).toBe(false);
    expect(await chargeProxyPayment(db, payment.reference, { outcome: 'late' })).toBe(false);
    expect(await findProxyPayment(db, id)).toMatchObject({ state: 'released', outcome: 'expired unused' });
    const record = await db.selectFrom('webhooks').selectAll().where('id', '=', webhookId!).executeTakeFirstOrThrow();
    expect(record).toMatchObject({
      status: 'payment_failed',
      tx_hash: null,
      network: 'base-sepolia',
      error: 'The payment to the target was not settled on-chain: expired unused',
      message: 'Nothing was paid; 20 reserved credits were released',
    });
    const after = await snapshot(account, payment.day);
    expect(after).toMatchObject({ balance: 100n, key: 0n, account: 0n, system: 0n });
    expect(after.ledger.map((entry) => [entry.kind, entry.amount_credits])).toEqual([
      ['grant', 100n],
      ['reserve', 20n],
      ['release', 20n],
    ]);
  });

  it('a row still reserved (never signed) is released; it cannot be charged', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 10n);
    expect(await holdProxyPayment(db, payment)).toMatchObject({ ok: true });
    expect(await chargeProxyPayment(db, payment.reference, { outcome: 'no' })).toBe(false);
    expect(await releaseProxyPayment(db, payment.reference, { outcome: 'not signed' })).toBe(true);
    expect(await snapshot(account, payment.day)).toMatchObject({
      balance: 100n,
      key: 0n,
      payments: [{ state: 'released' }],
    });
  });

  it('a row written as the previous release holds (naming neither network class nor day) takes them from its reservation, and is released on them', async () => {
    const account = await createTestAccount(db, { credits: 100n });
    const payment = newPayment(account, 13n);
    const reservation = reserveCreditsCall({
      reference: payment.reference,
      organisationId: account.organisationId,
      accountId: account.accountId,
      apiKeyId: account.apiKeyId,
      keyDailyCapCredits: 1_000_000n,
      networkClass: 'testnet',
      day: payment.day,
      credits: 13n,
      accountDailyLimitCredits: 1_000_000n,
      systemDailyLimitCredits: 1_000_000_000n,
    });
    await sql`
      with r as (select * from ${reservation}),
      p as (
        insert into proxy_payments (reference, organisation_id, account_id, api_key_id, request_id, target_url,
          network, chain_type, pay_to, amount_micro_usdc, credits, state)
        select ${payment.reference}, ${account.organisationId}, ${account.accountId}, ${account.apiKeyId}, 'req-old',
          'http://target.test/paid', 'base-sepolia', 'evm', ${CHOICE.requirements.payTo}, 12345, 13, 'reserved'
        from r where r.reserved
        returning id
      )
      select r.*, (select p.id from p) as id from r`.execute(db);
    expect(await snapshot(account, payment.day)).toMatchObject({
      balance: 87n,
      key: 13n,
      account: 13n,
      system: 13n,
      payments: [{ state: 'reserved', network_class: 'testnet', spend_day: payment.day }],
    });
    expect(await releaseProxyPayment(db, payment.reference, { outcome: 'never signed' })).toBe(true);
    expect(await snapshot(account, payment.day)).toMatchObject({ balance: 100n, key: 0n, account: 0n, system: 0n });
  });
});
