import { readdirSync, readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { DATABASE_FUNCTIONS, RETIRED_FUNCTIONS } from '../../db/functions/index';
import { createDb, migrateToLatest } from '../../db/index';
import { migrationProvider } from '../../db/migrations/index';
import { Migrator } from 'kysely';
import { createEmptyTestDatabase } from '../support/database';

/** Every migration by name, in the order it runs: a new one is added here. */
const EVERY_MIGRATION = [
  '2026_11_21_0001_foundation',
  '2026_11_21_0002_credit_reservations',
  '2026_11_21_0004_relay_transactions',
  '2026_11_21_0005_proxy_payments',
  '2026_11_21_0006_relay_delivery',
  '2026_11_21_0007_api_key_notify',
  '2026_11_21_0008_reserve_function',
  '2026_11_21_0009_spend_units',
  '2026_11_22_0010_idempotency_records',
  '2026_11_25_0011_idempotency_leases',
  '2026_11_25_0012_signed_transactions',
  '2026_11_28_0013_key_policies',
  '2026_11_28_0014_credit_purchases',
  '2026_11_28_0015_paid_resource_calls',
  '2026_11_28_0016_usage_reads',
  '2026_11_28_0017_usage_daily',
  '2026_11_29_0017_finality_watches',
  '2026_11_29_0018_spending_approvals',
  '2026_11_30_0020_upto_payments',
  '2026_11_30_0021_upto_client_payments',
  '2026_11_30_0024_finality_follow',
  '2026_11_30_0024_usage_daily_direct',
  '2026_11_30_0026_relay_follow',
  '2026_11_30_0027_finality_upto_amounts',
  '2026_12_01_0028_usage_daily_rows',
  '2026_12_01_0029_column_domains',
  '2026_12_01_0030_relay_finality_when',
  '2026_12_01_0031_unread_indexes',
  '2026_12_01_0032_usage_settled_only',
  '2026_12_01_0033_reservations_on_payments',
  '2026_12_01_0034_paid_call_key_checks',
  '2026_12_01_0035_upto_exposure',
  '2026_12_01_0036_finality_follow_first',
  '2026_12_02_0037_receiver_channels',
  '2026_12_02_0039_payer_channels',
  '2026_12_02_0040_wallet_floats',
  '2026_12_02_0041_payer_channel_idle',
];

describe('migrations', () => {
  it('leave each table a paid call writes only indexes some query reads (every write maintains them all)', async () => {
    const database = await createEmptyTestDatabase('indexes');
    try {
      await migrateToLatest(database.handle.db);
      const { rows } = await sql<{ tablename: string; indexname: string }>`
        select tablename, indexname from pg_indexes
          where tablename in ('relay_transactions', 'proxy_payments', 'credit_ledger', 'upto_exposure', 'upto_defaulted_payers')
          order by tablename, indexname`.execute(database.handle.db);
      expect(rows.map((row) => `${row.tablename}: ${row.indexname}`)).toEqual([
        'credit_ledger: credit_ledger_organisation_movements', // an organisation's ledger (payments/accounts/usage.ts)
        'credit_ledger: credit_ledger_pkey',
        'credit_ledger: credit_ledger_reference', // a charge's finality (payments/tracking/finality.ts)
        'proxy_payments: proxy_payments_idempotency_claim', // a lapsed claim's payment (payments/basics/idempotency.ts)
        'proxy_payments: proxy_payments_key_created', // an organisation's payments by key (payments/accounts/usage.ts)
        'proxy_payments: proxy_payments_open', // the sweep of open payments, the pending spend of GET /v1/usage
        'proxy_payments: proxy_payments_organisation_created', // an organisation's payments (payments/accounts/usage.ts)
        'proxy_payments: proxy_payments_organisation_host', // an organisation's payments by host (payments/accounts/usage.ts)
        'proxy_payments: proxy_payments_pkey',
        'proxy_payments: proxy_payments_reference_key', // every move of a payment
        'proxy_payments: proxy_payments_webhook', // a webhook record's payment (payments/tracking/webhooks.ts)
        'relay_transactions: relay_transactions_due', // the follow job (payments/operations/relay/follow.ts)
        'relay_transactions: relay_transactions_idempotency_claim', // a lapsed claim's payment (payments/basics/idempotency.ts)
        'relay_transactions: relay_transactions_nonce', // the replay guard
        'relay_transactions: relay_transactions_pkey',
        'relay_transactions: relay_transactions_unfinished', // the sweeps (payments/operations/relay/finish.ts)
        'relay_transactions: relay_transactions_webhook', // one record per transaction
        'upto_defaulted_payers: upto_defaulted_payers_pkey', // an upto admission (admit_relay_payment)
        'upto_exposure: upto_exposure_pkey', // an upto admission (add_upto_exposure), its release (release_upto_exposure)
      ]);
    } finally {
      await database.drop();
    }
  });

  it('build every table on an empty database, are idempotent and leave the functions of db/functions', async () => {
    const database = await createEmptyTestDatabase('empty');
    const { handle } = database;
    try {
      expect(await migrateToLatest(handle.db)).toEqual(EVERY_MIGRATION);
      expect(await migrateToLatest(handle.db)).toEqual([]);
      const tables = await sql<{ table_name: string }>`
        select table_name from information_schema.tables where table_schema = 'public' and table_name not like 'kysely%' order by table_name`.execute(
        handle.db,
      );
      expect(tables.rows.map((row) => row.table_name)).toEqual([
        'accounts',
        'api_keys',
        'credit_ledger',
        'credit_purchases',
        'daily_spend',
        'finality_watches',
        'idempotency_records',
        'organisations',
        'paid_resource_calls',
        'payer_channels',
        'payer_vouchers',
        'proxy_payments',
        'receiver_channel_charges',
        'receiver_channel_claims',
        'receiver_channels',
        'refunds',
        'relay_transactions',
        'spending_approvals',
        'upto_defaulted_payers',
        'upto_exposure',
        'usage_daily',
        'wallet_floats',
        'webhooks',
      ]);
      // The database functions are their files' source, re-applied on every migrate (also by
      // several processes at once): a definition left by an older release is replaced.
      await sql`create or replace function give_back_credits(p proxy_payments, p_credits bigint) returns void language sql as 'select'`.execute(
        handle.db,
      );
      const concurrent = Array.from({ length: 3 }, () => createDb(database.url, { maxConnections: 2 }));
      try {
        expect(await Promise.all(concurrent.map((other) => migrateToLatest(other.db)))).toEqual([[], [], []]);
      } finally {
        await Promise.all(concurrent.map((other) => other.close()));
      }
      const functionsFolder = new URL('../../db/functions/', import.meta.url);
      const sqlFiles = readdirSync(functionsFolder).filter((file) => file.endsWith('.sql'));
      const fileSource = (name: string) => readFileSync(new URL(`${name}.sql`, functionsFolder), 'utf8');
      expect(sqlFiles.map((file) => file.replace(/\.sql$/, '')).sort()).toEqual([...DATABASE_FUNCTIONS].sort());
      for (const name of DATABASE_FUNCTIONS) {
        const { rows } = await sql<{ prosrc: string }>`select prosrc from pg_proc where proname = ${name}`.execute(
          handle.db,
        );
        expect(
          rows.map((row) => row.prosrc),
          name,
        ).toEqual([fileSource(name).split('$fn$')[1]]);
      }
      // A retired function (created by a released migration) is gone once its callers are replaced.
      for (const signature of RETIRED_FUNCTIONS) {
        const { rows } = await sql<{
          found: string | null;
        }>`select to_regprocedure(${signature})::text as found`.execute(handle.db);
        expect(rows, signature).toEqual([{ found: null }]);
      }
      // The balance can never go negative, whatever code runs.
      const organisation = await handle.db
        .insertInto('organisations')
        .values({ name: 'x' })
        .returning('id')
        .executeTakeFirstOrThrow();
      await expect(
        handle.db.updateTable('organisations').set({ credit_balance: -1n }).where('id', '=', organisation.id).execute(),
      ).rejects.toThrow(/credit_balance/);
    } finally {
      await database.drop();
    }
  });

  it('carry every daily counter over to the column of its unit, exactly', async () => {
    const database = await createEmptyTestDatabase('units');
    const { handle } = database;
    try {
      const migrator = new Migrator({ db: handle.db, provider: migrationProvider });
      const before = await migrator.migrateTo('2026_11_21_0008_reserve_function');
      expect(before.error).toBeUndefined();
      // Rows as the released schema wrote them: one counter, micro-USDC or credits by scope. The
      // relay amount is past 2^53, where a float would lose it.
      await sql`
        insert into daily_spend (scope, scope_id, network_class, day, spent) values
          ('relay_wallet', '0xabc', 'testnet', '2026-11-20', 9007199254740993),
          ('relay_system', 'system', 'mainnet', '2026-11-20', 125500000),
          ('proxy_account', '7', 'mainnet', '2026-11-20', 2500),
          ('proxy_system', 'system', 'testnet', '2026-11-20', 0),
          ('api_key', '3', 'all', '2026-11-20', 250)`.execute(handle.db);
      expect(await migrateToLatest(handle.db)).toEqual(
        EVERY_MIGRATION.slice(EVERY_MIGRATION.indexOf('2026_11_21_0009_spend_units')),
      );
      const rows = await handle.db
        .selectFrom('daily_spend')
        .select(['scope', 'scope_id', 'spent_micro_usdc', 'spent_credits'])
        .orderBy('scope')
        .orderBy('scope_id')
        .execute();
      expect(rows).toEqual([
        { scope: 'api_key', scope_id: '3', spent_micro_usdc: 0n, spent_credits: 250n },
        { scope: 'proxy_account', scope_id: '7', spent_micro_usdc: 0n, spent_credits: 2_500n },
        { scope: 'proxy_system', scope_id: 'system', spent_micro_usdc: 0n, spent_credits: 0n },
        { scope: 'relay_system', scope_id: 'system', spent_micro_usdc: 125_500_000n, spent_credits: 0n },
        { scope: 'relay_wallet', scope_id: '0xabc', spent_micro_usdc: 9_007_199_254_740_993n, spent_credits: 0n },
      ]);
      // A counter of the other unit cannot be written.
      await expect(
        handle.db.updateTable('daily_spend').set({ spent_credits: 1n }).where('scope', '=', 'relay_wallet').execute(),
      ).rejects.toThrow(/daily_spend_one_unit/);
    } finally {
      await database.drop();
    }
  });
});
