/**
 * GET /v1/payments and GET /v1/usage with 100,000 payment rows: a database of its own on the
 * bench's Postgres, one organisation's payments spread over 90 days (five keys, twenty target
 * hosts, charged, released and pending, with their reservations and ledger entries) beside another
 * organisation's, then a service on it answering one request at a time. p50 and p95 of each read,
 * against the goal of 50 ms at p95.
 */
import pg from 'pg';
import { createApiKey, createOrganisation } from '../../../../payments/accounts/accounts';
import { grantCredits } from '../../../../payments/accounts/credits';
import { createDb, migrateToLatest } from '../../../../db/index';
import { defined } from '../../checked';
import type { ServiceChild } from '../../serviceChild';
import { fmt, progress, say } from '../output';
import { onServer, type Bench } from '../setup';

const ROWS = 100_000;
const OTHER_ROWS = 10_000;
const SAMPLES = 200;
const WARMUP = 20;
const GOAL_MS = 50;

/** `rows` payments of the organisation's keys, created over the last 90 days (those still open in the last minutes), with their reservation and ledger rows. */
async function seedPayments(
  client: pg.Client,
  organisationId: bigint,
  accountId: bigint,
  keyIds: bigint[],
  rows: number,
  label: string,
): Promise<void> {
  await client.query(
    `
    with p as (
      select i,
        $1::text || '-' || i as reference,
        ($4::bigint[])[1 + i % array_length($4::bigint[], 1)] as api_key_id,
        -- A payment still open (signed) is minutes old, as in service: older, the sweep would hand
        -- each to a watch job while the reads are measured.
        case when s.state = 'signed' then now() - (i % 300) * interval '1 second'
             else now() - (i % 90) * interval '1 day' - (i % 86400) * interval '1 second' end as created_at,
        s.state,
        1000 + (i % 97) * 100 as amount
      from generate_series(1, $5::int) i
      cross join lateral (
        select case when i % 20 = 0 then 'released' when i % 50 = 1 then 'signed' else 'charged' end as state
      ) s
    ), l as (
      insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference, created_at)
      select $2, $3, api_key_id, kind, ceil(amount * 1.03 / 1000), reference, created_at
      from p cross join lateral (values ('reserve'), (case state when 'released' then 'release' when 'charged' then 'charge' end)) k(kind)
      where kind is not null
    )
    insert into proxy_payments (reference, organisation_id, account_id, api_key_id, request_id, target_url, network, chain_type,
      pay_to, amount_micro_usdc, credits, network_class, spend_day, state, payer, valid_before, tx_hash, created_at, signed_at, settled_at)
    select reference, $2, $3, api_key_id, 'bench-' || i,
      'https://api' || (i % 20) || '.example.com/v1/resource/' || (i % 1000) || '?q=' || i,
      'base-sepolia', 'evm', '0x1111111111111111111111111111111111111111', amount, ceil(amount * 1.03 / 1000),
      'testnet', (created_at at time zone 'UTC')::date, state,
      '0x2222222222222222222222222222222222222222', 1900000000,
      case when state = 'charged' then '0x' || md5(reference) || md5(reference) end,
      created_at, created_at, case when state = 'signed' then null else created_at end
    from p`,
    [label, organisationId, accountId, keyIds, rows],
  );
}

async function seed(url: string): Promise<{ key: string; keyPrefix: string }> {
  const handle = createDb(url, { maxConnections: 2 });
  try {
    await migrateToLatest(handle.db);
    const keys: Array<{ apiKeyId: bigint; key: string; prefix: string }> = [];
    const organisation = await createOrganisation(handle.db, 'Usage bench');
    for (let index = 0; index < 5; index += 1)
      keys.push(await createApiKey(handle.db, organisation.accountId, 1_000_000_000n));
    await grantCredits(handle.db, organisation.organisationId, 1_000_000_000n, 'bench grant');
    const other = await createOrganisation(handle.db, 'Another organisation');
    const otherKey = await createApiKey(handle.db, other.accountId, 1_000_000_000n);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await seedPayments(
        client,
        organisation.organisationId,
        organisation.accountId,
        keys.map((key) => key.apiKeyId),
        ROWS,
        'usage',
      );
      await seedPayments(client, other.organisationId, other.accountId, [otherKey.apiKeyId], OTHER_ROWS, 'other');
      // Every table the seeding wrote, usage_daily too (its triggers updated its rows once per
      // payment): the reads are measured on a settled database, not beside autovacuum catching up.
      await client.query('vacuum analyze proxy_payments, credit_ledger, usage_daily');
    } finally {
      await client.end();
    }
    const first = defined(keys[0], 'the first key');
    return { key: first.key, keyPrefix: first.prefix };
  } finally {
    await handle.close();
  }
}

function percentile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? NaN;
}

/** One request at a time: its latency as the client sees it, every answer a 200. */
async function measure(url: string, key: string): Promise<{ p50: number; p95: number; bytes: number }> {
  const samples: number[] = [];
  let bytes = 0;
  for (let index = 0; index < WARMUP + SAMPLES; index += 1) {
    const started = performance.now();
    const response = await fetch(url, { headers: { 'x-api-key': key } });
    const body = await response.text();
    const elapsed = performance.now() - started;
    if (response.status !== 200) throw new Error(`${url} answered ${response.status}: ${body.slice(0, 300)}`);
    bytes = body.length;
    if (index >= WARMUP) samples.push(elapsed);
  }
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 0.5), p95: percentile(samples, 0.95), bytes };
}

export async function usage(bench: Bench, service: ServiceChild): Promise<void> {
  say();
  say(
    `## GET /v1/payments and GET /v1/usage with ${ROWS.toLocaleString('en-US')} payment rows of one organisation over 90 days (and ${OTHER_ROWS.toLocaleString('en-US')} of another); one request at a time, ${SAMPLES} each`,
  );
  const name = `bench_usage_${process.pid}_${Date.now().toString(36)}`;
  await onServer(service.databaseUrl, `create database "${name}"`);
  const url = new URL(service.databaseUrl);
  url.pathname = `/${name}`;
  let usageService: ServiceChild | undefined;
  try {
    progress(`usage: seeding ${ROWS.toLocaleString('en-US')} payment rows`);
    const startedSeed = performance.now();
    const { key, keyPrefix } = await seed(url.toString());
    say(
      `  seeded in ${((performance.now() - startedSeed) / 1000).toFixed(1)} s (with their reservations and ledger entries)`,
    );
    usageService = await bench.startService('usage', { DATABASE_URL: url.toString() });
    const base = usageService.url;
    const first = (await (await fetch(`${base}/v1/payments?limit=50`, { headers: { 'x-api-key': key } })).json()) as {
      next_cursor: string | null;
    };
    const cursor = defined(first.next_cursor ?? undefined, 'a second page');
    const reads: Array<[string, string, 'payments' | 'usage']> = [
      ['GET /v1/payments (first page, 50)', '/v1/payments', 'payments'],
      ['GET /v1/payments?limit=200', '/v1/payments?limit=200', 'payments'],
      ['GET /v1/payments (next page, cursor)', `/v1/payments?cursor=${cursor}`, 'payments'],
      ['GET /v1/payments?host=api7.example.com', '/v1/payments?host=api7.example.com', 'payments'],
      [`GET /v1/payments?key=${keyPrefix}`, `/v1/payments?key=${keyPrefix}`, 'payments'],
      ['GET /v1/payments?status=released', '/v1/payments?status=released', 'payments'],
      ['GET /v1/usage (30 days)', '/v1/usage', 'usage'],
      ['GET /v1/usage (90 days, every row)', `/v1/usage?from=${ninetyDaysAgo()}`, 'usage'],
    ];
    const rows: Array<{ name: string; p50: number; p95: number; kind: string }> = [];
    for (const [label, path, kind] of reads) {
      progress(`usage: ${label}`);
      const figures = await measure(`${base}${path}`, key);
      rows.push({ name: label, p50: figures.p50, p95: figures.p95, kind });
    }
    const width = Math.max(...rows.map((row) => row.name.length));
    say(`  ${'read'.padEnd(width)}  ${'p50 ms'.padStart(7)}  ${'p95 ms'.padStart(7)}`);
    for (const row of rows)
      say(`  ${row.name.padEnd(width)}  ${fmt.ms(row.p50).padStart(7)}  ${fmt.ms(row.p95).padStart(7)}`);
    for (const kind of ['payments', 'usage']) {
      const worst = Math.max(...rows.filter((row) => row.kind === kind).map((row) => row.p95));
      bench.goals.push({
        goal: `GET /v1/${kind} under ${GOAL_MS} ms at p95 with ${ROWS.toLocaleString('en-US')} payment rows`,
        figure: `worst p95 ${fmt.ms(worst)} ms`,
        met: worst < GOAL_MS,
      });
    }
    bench.results.usage = rows;
  } finally {
    if (usageService) await bench.stopService(usageService);
    await onServer(service.databaseUrl, `drop database if exists "${name}" with (force)`);
  }
}

function ninetyDaysAgo(): string {
  const day = new Date();
  day.setUTCDate(day.getUTCDate() - 89);
  return day.toISOString().slice(0, 10);
}
