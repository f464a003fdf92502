// The daily summary of proxy payments (usage_daily) that GET /v1/usage reads: kept by the
// database's triggers in the transaction of every write of proxy_payments, it equals the sums
// over proxy_payments after payments are made, charged and released, after a payment's state,
// amounts, day, key or target change by any statement, after deletes, bulk writes and a rolled
// back change; and the migration that creates it sums the payments already there.
import { Migrator, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateToLatest, type Db } from '../../db/index';
import { migrationProvider } from '../../db/migrations/index';
import { createApiKey, createOrganisation } from '../../payments/accounts/accounts';
import { chargeProxyPayment, releaseProxyPayment } from '../../payments/operations/proxy/records';
import { usageReport } from '../../payments/accounts/usage';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { createEmptyTestDatabase, createTestDatabase, type TestDatabase } from '../support/database';
import { recordProxyPayment } from '../support/payments';

interface Bucket {
  organisation_id: string;
  day: string;
  api_key_id: string;
  target_host: string;
  charged: string;
  released: string;
}

/**
 * The summary's rows, and the same sums computed from proxy_payments itself, each bucket as
 * `count/credits/micro-USDC`; rows whose figures are all zero say nothing and are left out. The
 * summary holds settled payments only (charged, released): a payment still open is counted when
 * the summary is read, and its pending columns stay zero.
 */
async function summaryAndPayments(db: Db): Promise<{ summary: Bucket[]; payments: Bucket[] }> {
  const summary = await sql<Bucket>`
    select organisation_id::text, to_char(day, 'YYYY-MM-DD') as day, api_key_id::text, target_host,
      concat_ws('/', charged_payments, charged_credits, charged_amount_micro_usdc) as charged,
      concat_ws('/', released_payments, released_credits, released_amount_micro_usdc) as released
    from usage_daily
    where (charged_payments, released_payments, charged_credits, released_credits) <> (0, 0, 0, 0)
    order by 1, 2, 3, 4`.execute(db);
  const pending = await sql<{ rows: bigint }>`
    select count(*) as rows from usage_daily
    where (pending_payments, pending_credits, pending_amount_micro_usdc) <> (0, 0, 0)`.execute(db);
  expect(pending.rows[0]?.rows).toBe(0n);
  const payments = await sql<Bucket>`
    select organisation_id::text, to_char((created_at at time zone 'UTC')::date, 'YYYY-MM-DD') as day,
      api_key_id::text, coalesce(target_host, '') as target_host,
      concat_ws('/', count(*) filter (where state = 'charged'), coalesce(sum(credits) filter (where state = 'charged'), 0),
        coalesce(sum(amount_micro_usdc) filter (where state = 'charged'), 0)) as charged,
      concat_ws('/', count(*) filter (where state = 'released'), coalesce(sum(credits) filter (where state = 'released'), 0),
        coalesce(sum(amount_micro_usdc) filter (where state = 'released'), 0)) as released
    from proxy_payments
    where state in ('charged', 'released')
    group by 1, 2, 3, 4
    order by 1, 2, 3, 4`.execute(db);
  return { summary: summary.rows, payments: payments.rows };
}

async function expectSummaryEqualsPayments(db: Db): Promise<Bucket[]> {
  const { summary, payments } = await summaryAndPayments(db);
  expect(summary).toEqual(payments);
  return summary;
}

const WEATHER = 'https://weather.example.com/v1/forecast?city=Paris';
const MAPS = 'https://maps.example.org/tiles/3/4';

describe('the daily usage summary', () => {
  let database: TestDatabase;
  let db: Db;
  let a: TestAccount;
  let a2: TestAccount;
  let b: TestAccount;

  beforeAll(async () => {
    database = await createTestDatabase();
    db = database.handle.db;
    a = await createTestAccount(db, { credits: 100_000n });
    a2 = { ...a, ...(await createApiKey(db, a.accountId, 100_000n)) };
    b = await createTestAccount(db, { credits: 100_000n });
  });
  afterAll(async () => {
    await database.drop();
  });

  const today = () => new Date().toISOString().slice(0, 10);
  const bucketOf = (rows: Bucket[], account: TestAccount, host: string, day = today()) =>
    rows.find(
      (row) =>
        row.organisation_id === account.organisationId.toString() &&
        row.api_key_id === account.apiKeyId.toString() &&
        row.target_host === host &&
        row.day === day,
    );

  it("follows a payment's state through the money functions and through any other statement", async () => {
    const charged = await recordProxyPayment(db, a, {
      targetUrl: WEATHER,
      amountMicroUsdc: 10_000n,
      credits: 11n,
      end: 'charged',
    });
    const pending = await recordProxyPayment(db, a, {
      targetUrl: WEATHER,
      amountMicroUsdc: 2_000n,
      credits: 3n,
      end: 'pending',
    });
    const other = await recordProxyPayment(db, a, {
      targetUrl: WEATHER,
      amountMicroUsdc: 5_000n,
      credits: 6n,
      end: 'pending',
    });
    await recordProxyPayment(db, b, { targetUrl: MAPS, amountMicroUsdc: 7_000n, credits: 8n, end: 'charged' });
    let rows = await expectSummaryEqualsPayments(db);
    expect(bucketOf(rows, a, 'weather.example.com')).toMatchObject({ charged: '1/11/10000', released: '0/0/0' });
    expect(bucketOf(rows, b, 'maps.example.org')).toMatchObject({ charged: '1/8/7000' });
    // The two open payments are read from their rows, by day, key and host.
    const range = { fromDay: today(), toDay: today() };
    const open = await usageReport(db, a.organisationId, range);
    expect(open.totals).toMatchObject({ payments: 1n, credits: 11n, pendingPayments: 2n, pendingCredits: 9n });
    expect(open.byHost.map((bucket) => [bucket.host, bucket.pendingPayments, bucket.pendingCredits])).toEqual([
      ['weather.example.com', 2n, 9n],
    ]);
    expect(open.byKey.map((bucket) => [bucket.keyPrefix, bucket.pendingCredits])).toEqual([[a.prefix, 9n]]);
    expect(open.byDay.map((bucket) => [bucket.day, bucket.pendingPayments])).toEqual([[today(), 2n]]);

    // pending -> charged, pending -> released, as /proxy and the watcher move them.
    expect(await chargeProxyPayment(db, pending.reference, { txHash: '0xabc', outcome: 'test: settled' })).toBe(true);
    expect(await releaseProxyPayment(db, other.reference, { outcome: 'test: expired' })).toBe(true);
    rows = await expectSummaryEqualsPayments(db);
    expect(bucketOf(rows, a, 'weather.example.com')).toMatchObject({ charged: '2/14/12000', released: '1/6/5000' });
    expect((await usageReport(db, a.organisationId, range)).totals).toMatchObject({
      payments: 2n,
      pendingPayments: 0n,
      pendingCredits: 0n,
    });

    // charged -> released, written by hand (an operator's correction after a refund): the summary follows.
    await db.updateTable('proxy_payments').set({ state: 'released' }).where('id', '=', charged.id).execute();
    rows = await expectSummaryEqualsPayments(db);
    expect(bucketOf(rows, a, 'weather.example.com')).toMatchObject({
      charged: '1/3/2000',
      released: '2/17/15000',
    });

    // A write that moves nothing summed (a transaction hash, an outcome) leaves the figures as they are.
    await db
      .updateTable('proxy_payments')
      .set({ outcome: 'noted', tx_hash: '0xdef' })
      .where('id', '=', charged.id)
      .execute();
    expect(await expectSummaryEqualsPayments(db)).toEqual(rows);

    // Amounts, day, key and target of one payment changed: it leaves its bucket for another.
    await sql`
      update proxy_payments set state = 'charged', credits = 21, amount_micro_usdc = 20000,
        created_at = created_at - interval '1 day', api_key_id = ${a2.apiKeyId}, target_url = ${MAPS}
      where id = ${charged.id}`.execute(db);
    rows = await expectSummaryEqualsPayments(db);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    expect(bucketOf(rows, a2, 'maps.example.org', yesterday)).toMatchObject({ charged: '1/21/20000' });
    expect(bucketOf(rows, a, 'weather.example.com')).toMatchObject({ charged: '1/3/2000', released: '1/6/5000' });

    // One statement over many rows of two organisations.
    await db.updateTable('proxy_payments').set({ state: 'released' }).where('state', '=', 'charged').execute();
    rows = await expectSummaryEqualsPayments(db);
    expect(bucketOf(rows, b, 'maps.example.org')).toMatchObject({ charged: '0/0/0', released: '1/8/7000' });

    // A change rolled back leaves the summary as it was.
    await expect(
      db.transaction().execute(async (tx) => {
        await tx.updateTable('proxy_payments').set({ state: 'charged' }).where('id', '=', other.id).execute();
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(await expectSummaryEqualsPayments(db)).toEqual(rows);

    // Deleted payments leave it (their finality watches first, which reference them).
    await db
      .deleteFrom('finality_watches')
      .where(
        'proxy_payment_id',
        'in',
        db.selectFrom('proxy_payments').select('id').where('organisation_id', '=', b.organisationId),
      )
      .execute();
    await db.deleteFrom('proxy_payments').where('organisation_id', '=', b.organisationId).execute();
    rows = await expectSummaryEqualsPayments(db);
    expect(bucketOf(rows, b, 'maps.example.org')).toBeUndefined();
  });

  it('is what GET /v1/usage sums: the report moves with a payment released after it was charged', async () => {
    const c = await createTestAccount(db, { credits: 10_000n });
    const first = await recordProxyPayment(db, c, {
      targetUrl: WEATHER,
      amountMicroUsdc: 30_000n,
      credits: 31n,
      end: 'charged',
    });
    await recordProxyPayment(db, c, { targetUrl: MAPS, amountMicroUsdc: 1_000n, credits: 2n, end: 'charged' });
    const range = { fromDay: today(), toDay: today() };
    expect((await usageReport(db, c.organisationId, range)).totals).toMatchObject({
      payments: 2n,
      credits: 33n,
      amountMicroUsdc: 31_000n,
      releasedPayments: 0n,
    });
    await db.updateTable('proxy_payments').set({ state: 'released' }).where('id', '=', first.id).execute();
    const report = await usageReport(db, c.organisationId, range);
    expect(report.totals).toMatchObject({
      payments: 1n,
      credits: 2n,
      amountMicroUsdc: 1_000n,
      releasedPayments: 1n,
      releasedCredits: 31n,
    });
    expect(report.byHost.map((bucket) => [bucket.host, bucket.credits, bucket.releasedCredits])).toEqual([
      ['maps.example.org', 2n, 0n],
      ['weather.example.com', 0n, 31n],
    ]);
  });
});

describe('the migration of the daily usage summary', () => {
  it('sums the payments written before it, in batches, and follows the writes after it', async () => {
    const database = await createEmptyTestDatabase('usage');
    const { handle } = database;
    try {
      const migrator = new Migrator({ db: handle.db, provider: migrationProvider });
      expect((await migrator.migrateTo('2026_11_28_0016_usage_reads')).error).toBeUndefined();
      const org = await createOrganisation(handle.db, 'Before the summary');
      const keys = [
        await createApiKey(handle.db, org.accountId, 1_000_000n),
        await createApiKey(handle.db, org.accountId, 1_000_000n),
      ];
      // 60,000 payments (more than one batch of the back-fill) over 7 days, 2 keys, 3 hosts
      // (one URL without a host), in every state.
      await sql`
        with p as (
          select i, 'backfill-' || i as reference,
            (${sql.val(keys.map((key) => key.apiKeyId))}::bigint[])[1 + i % 2] as api_key_id,
            timestamptz '2026-11-20 12:00:00+00' - (i % 7) * interval '1 day' as created_at,
            (array['reserved', 'signed', 'charged', 'charged', 'released'])[1 + i % 5] as state,
            1000 + (i % 7) * 100 as amount
          from generate_series(1, 60000) i
        ), r as (
          insert into credit_reservations (reference, organisation_id, account_id, api_key_id, network_class, day, credits, state, created_at)
          select reference, ${org.organisationId}, ${org.accountId}, api_key_id, 'testnet', (created_at at time zone 'UTC')::date,
            ceil(amount * 1.03 / 1000), case state when 'signed' then 'reserved' else state end, created_at
          from p
        )
        insert into proxy_payments (reference, organisation_id, account_id, api_key_id, request_id, target_url, network,
          chain_type, pay_to, amount_micro_usdc, credits, state, created_at)
        select reference, ${org.organisationId}, ${org.accountId}, api_key_id, 'r-' || i,
          (array['https://a.example.com/x', 'http://B.example.com:8080/y', 'not a url'])[1 + i % 3],
          'base-sepolia', 'evm', '0x1111111111111111111111111111111111111111', amount, ceil(amount * 1.03 / 1000), state, created_at
        from p`.execute(handle.db);

      expect(await migrateToLatest(handle.db)).toContain('2026_11_28_0017_usage_daily');
      const rows = await expectSummaryEqualsPayments(handle.db);
      // 7 days x 2 keys x 3 hosts: i % 7, i % 2 and i % 3 take every combination.
      expect(rows).toHaveLength(42);
      expect(rows.map((row) => row.target_host).sort()).toContain('');
      const range = { fromDay: '2026-11-14', toDay: '2026-11-20' };
      const totals = await sql<{ charged: bigint; released: bigint; pending: bigint }>`
        select count(*) filter (where state = 'charged') as charged, count(*) filter (where state = 'released') as released,
          count(*) filter (where state in ('reserved', 'signed')) as pending
        from proxy_payments`.execute(handle.db);
      expect((await usageReport(handle.db, org.organisationId, range)).totals).toMatchObject({
        payments: totals.rows[0]!.charged,
        releasedPayments: totals.rows[0]!.released,
        pendingPayments: totals.rows[0]!.pending,
      });
      expect(totals.rows[0]).toEqual({ charged: 24_000n, released: 12_000n, pending: 24_000n });

      // Back to the release whose summary also counted open payments, and forward again: the open
      // payments are counted back into its pending columns, then left to the read again.
      expect((await migrator.migrateTo('2026_12_01_0031_unread_indexes')).error).toBeUndefined();
      const counted = await sql<{ payments: bigint; credits: bigint }>`
        select sum(pending_payments)::bigint as payments, sum(pending_credits)::bigint as credits from usage_daily`.execute(
        handle.db,
      );
      const open = await sql<{ payments: bigint; credits: bigint }>`
        select count(*) as payments, sum(credits)::bigint as credits from proxy_payments
        where state in ('reserved', 'signed')`.execute(handle.db);
      expect(counted.rows[0]).toEqual(open.rows[0]);
      // The reservations, written back from the payment rows that held them, move as their payments do.
      const reservations = await sql<{ state: string; count: bigint }>`
        select state, count(*) as count from credit_reservations group by state order by state`.execute(handle.db);
      expect(reservations.rows).toEqual([
        { state: 'charged', count: 24_000n },
        { state: 'released', count: 12_000n },
        { state: 'reserved', count: 24_000n },
      ]);
      expect((await migrateToLatest(handle.db)).slice(0, 3)).toEqual([
        '2026_12_01_0032_usage_settled_only',
        '2026_12_01_0033_reservations_on_payments',
        '2026_12_01_0034_paid_call_key_checks',
      ]);
      const held = await sql<{ rows: bigint }>`
        select count(*) as rows from proxy_payments
        where network_class = 'testnet' and spend_day = (created_at at time zone 'UTC')::date`.execute(handle.db);
      expect(held.rows[0]?.rows).toBe(60_000n);
      await expectSummaryEqualsPayments(handle.db);

      // After the migration, the triggers carry it on.
      await handle.db.updateTable('proxy_payments').set({ state: 'released' }).where('state', '=', 'signed').execute();
      await expectSummaryEqualsPayments(handle.db);
    } finally {
      await database.drop();
    }
    // A bound, not a speed goal: 60,000 rows migrated three times take minutes on a loaded machine.
  }, 600_000);
});
