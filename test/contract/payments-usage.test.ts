// GET /v1/payments and GET /v1/usage: an organisation reads its own /proxy payments and grants,
// and its spend by day, key and target host, summed from the same records as the ledger; two
// organisations with several keys, and not one row of the other by any filter or cursor.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { createApiKey } from '../../payments/accounts/accounts';
import { grantCredits } from '../../payments/accounts/credits';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { recordProxyPayment, type PaymentEnd, type RecordedPayment } from '../support/payments';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
let db: Db;
/** Organisation A: keys a1 and a2; organisation B: key b1. */
let a1: TestAccount;
let a2: TestAccount;
let b1: TestAccount;
const recorded = new Map<string, { account: TestAccount; end: PaymentEnd; row: RecordedPayment; credits: bigint }>();

const WEATHER = 'https://weather.example.com:8443/v1/forecast?city=Paris&token=secret';
const MAPS = 'http://Maps.Example.org/tiles/3/4?key=hidden';
const THEIRS = 'https://theirs.example.net/private?x=1';

async function pay(account: TestAccount, targetUrl: string, amountMicroUsdc: bigint, end: PaymentEnd) {
  const credits = (amountMicroUsdc * 103n + 99_999n) / 100_000n;
  const row = await recordProxyPayment(db, account, { targetUrl, amountMicroUsdc, credits, end });
  recorded.set(`pay_${row.id}`, { account, end, row, credits });
  return row;
}

function get(account: TestAccount, path: string) {
  return t.client.get(path, { headers: { 'x-api-key': account.key } });
}

beforeAll(async () => {
  t = await startTestService({ NETWORKS: 'base,base-sepolia' });
  db = t.database.handle.db;
  a1 = await createTestAccount(db, { credits: 5_000n });
  a2 = { ...a1, ...(await createApiKey(db, a1.accountId, 100_000n)) };
  b1 = await createTestAccount(db, { credits: 3_000n });
  await grantCredits(db, a1.organisationId, 1_000n, 'second grant');
  // A mixed day: paid, released and pending payments by two keys of A to two hosts; B pays too.
  await pay(a1, WEATHER, 10_000n, 'charged');
  await pay(a1, WEATHER, 12_345n, 'charged');
  await pay(a1, WEATHER, 5_000n, 'released');
  await pay(a1, MAPS, 2_000n, 'pending');
  await pay(a2, MAPS, 7_000n, 'charged');
  await pay(a2, MAPS, 1_000n, 'charged');
  await pay(a2, WEATHER, 3_000n, 'released');
  await pay(b1, THEIRS, 50_000n, 'charged');
  await pay(b1, WEATHER, 4_000n, 'charged');
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

/** Every item of a listing, page after page. */
async function everyItem(account: TestAccount, query: string, limit: number) {
  const items: any[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 50; pages += 1) {
    const separator = query === '' ? '' : '&';
    const res = await get(
      account,
      `/v1/payments?${query}${separator}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    expect(res.status).toBe(200);
    expect(res.body.items.length).toBeLessThanOrEqual(limit);
    items.push(...res.body.items);
    cursor = res.body.next_cursor;
    if (cursor === null) return items;
  }
  throw new Error('more than 50 pages');
}

async function ledgerSums(organisationId: bigint, apiKeyId?: bigint) {
  let query = db
    .selectFrom('credit_ledger')
    .select(['kind', 'amount_credits'])
    .where('organisation_id', '=', organisationId);
  if (apiKeyId !== undefined) query = query.where('api_key_id', '=', apiKeyId);
  const sums = { grant: 0, reserve: 0, charge: 0, release: 0, refund: 0, purchase: 0 };
  for (const row of await query.execute()) sums[row.kind] += Number(row.amount_credits);
  return sums;
}

describe('GET /v1/payments', () => {
  it("lists the organisation's payments and grants newest first, with target, amounts, fee, status, transaction and key", async () => {
    const res = await get(a1, '/v1/payments');
    expect(res.status).toBe(200);
    expect(res.body.next_cursor).toBeNull();
    const items = res.body.items;
    // 7 payments of A (both keys) and its 2 grants; nothing of B.
    expect(items).toHaveLength(9);
    expect(items.map((item: any) => item.kind).sort()).toEqual([
      'grant',
      'grant',
      ...Array<string>(7).fill('proxy_payment'),
    ]);
    const created = items.map((item: any) => item.created_at);
    expect([...created].sort().reverse()).toEqual(created);
    const first = items.find((item: any) => item.kind === 'proxy_payment' && item.amount_micro_usdc === '12345');
    const recordedFirst = recorded.get(first.id)!;
    expect(first).toEqual({
      id: first.id,
      kind: 'proxy_payment',
      status: 'charged',
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
      settled_at: expect.any(String),
      key_prefix: a1.prefix,
      target: { origin: 'https://weather.example.com:8443', path: '/v1/forecast' },
      network: 'base-sepolia',
      amount_micro_usdc: '12345',
      credits: 13,
      fee_micro_usdc: '655',
      tx_hash: recordedFirst.row.txHash,
      // The service pays on the public base-sepolia here: its explorer is known.
      explorer_url: `https://sepolia.basescan.org/tx/${recordedFirst.row.txHash}`,
      webhook_id: null,
    });
    expect(res.text).not.toContain('secret');
    expect(res.text).not.toContain('hidden');
    expect(res.text).not.toContain('city=');
    const pending = items.find((item: any) => item.status === 'pending');
    expect(pending).toMatchObject({
      target: { origin: 'http://maps.example.org', path: '/tiles/3/4' },
      settled_at: null,
      tx_hash: null,
      explorer_url: null,
    });
    const grants = items.filter((item: any) => item.kind === 'grant');
    expect(grants.map((grant: any) => grant.credits)).toEqual([1_000, 5_000]);
    expect(grants[0]).toMatchObject({
      status: 'credited',
      key_prefix: null,
      target: null,
      amount_micro_usdc: null,
      fee_micro_usdc: null,
    });
  });

  it('pages through every item exactly once with its cursor, at most 200 a page', async () => {
    const all = await everyItem(a1, '', 200);
    for (const limit of [1, 2, 4]) {
      const paged = await everyItem(a1, '', limit);
      expect(paged.map((item) => item.id)).toEqual(all.map((item) => item.id));
    }
    expect((await get(a1, '/v1/payments?limit=201')).status).toBe(400);
    expect((await get(a1, '/v1/payments?limit=0')).status).toBe(400);
  });

  it('filters by key, target host, status, kind and time', async () => {
    const byKey = await everyItem(a1, `key=${a2.prefix}`, 2);
    expect(byKey.map((item) => item.key_prefix)).toEqual([a2.prefix, a2.prefix, a2.prefix]);
    const byHost = await everyItem(a1, 'host=weather.example.com:8443', 2);
    expect(byHost).toHaveLength(4);
    expect(byHost.every((item) => item.target.origin === 'https://weather.example.com:8443')).toBe(true);
    // Case-insensitive, the default port left out as URL hosts leave it.
    expect(await everyItem(a1, 'host=MAPS.example.org', 5)).toHaveLength(3);
    expect((await everyItem(a1, 'status=released', 5)).map((item) => recorded.get(item.id)?.end)).toEqual([
      'released',
      'released',
    ]);
    expect(await everyItem(a1, 'status=pending', 5)).toHaveLength(1);
    expect(await everyItem(a1, 'status=credited', 5)).toHaveLength(2);
    expect(await everyItem(a1, 'kind=grant', 5)).toHaveLength(2);
    expect(await everyItem(a1, 'kind=proxy_payment&status=charged&host=maps.example.org', 1)).toHaveLength(2);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const past = new Date(Date.now() - 3_600_000).toISOString();
    expect(await everyItem(a1, `from=${encodeURIComponent(future)}`, 5)).toHaveLength(0);
    expect(await everyItem(a1, `from=${encodeURIComponent(past)}&to=${encodeURIComponent(future)}`, 5)).toHaveLength(9);
  });

  it("never shows a row of another organisation, by any filter or cursor; another organisation's cursor is a 400", async () => {
    const ofA = new Set((await everyItem(a1, '', 200)).map((item) => item.id));
    const ofB = await everyItem(b1, '', 200);
    expect(ofB.map((item) => item.kind).sort()).toEqual(['grant', 'proxy_payment', 'proxy_payment']);
    expect(ofB.filter((item) => ofA.has(item.id))).toEqual([]);
    // A's key prefix, A's host, every status: B sees only its own rows.
    expect(await everyItem(b1, `key=${a1.prefix}`, 5)).toEqual([]);
    expect(await everyItem(b1, 'host=maps.example.org', 5)).toEqual([]);
    const bWeather = await everyItem(b1, 'host=weather.example.com:8443', 5);
    expect(bWeather.map((item) => item.key_prefix)).toEqual([b1.prefix]);
    for (const status of ['pending', 'charged', 'released', 'credited'])
      for (const item of await everyItem(b1, `status=${status}`, 5)) expect(ofA.has(item.id)).toBe(false);

    // A cursor of A's history, presented with B's key (same filters): refused, nothing listed.
    const first = await get(a1, '/v1/payments?limit=2');
    const cursor = first.body.next_cursor as string;
    const stolen = await get(b1, `/v1/payments?limit=2&cursor=${cursor}`);
    expect(stolen.status).toBe(400);
    expect(stolen.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: "The cursor belongs to another organisation's history.",
    });
    // A's own cursor with other filters, and a forged one: 400 as well.
    const otherQuery = await get(a1, `/v1/payments?limit=2&status=charged&cursor=${cursor}`);
    expect(otherQuery.status).toBe(400);
    expect(otherQuery.body.details).toMatch(/other filters/);
    const forged = Buffer.from(`1|${b1.organisationId}|x|2099-01-01T00:00:00.000000Z|1|1`).toString('base64url');
    expect((await get(b1, `/v1/payments?cursor=${forged}`)).status).toBe(400);
    expect((await get(a1, '/v1/payments?cursor=bm90LWEtY3Vyc29y')).status).toBe(400);
  });

  it('refuses an unknown filter or a malformed one with 400, naming it', async () => {
    const unknown = await get(a1, '/v1/payments?organisation=2');
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ code: 'validation_failed' });
    expect(unknown.body.details).toContain('organisation');
    for (const query of ['status=refunded', 'kind=relay', 'from=yesterday', 'key=sk_live', 'host=a/b', 'cursor=%2F%2F'])
      expect((await get(a1, `/v1/payments?${query}`)).status, query).toBe(400);
  });
});

describe('GET /v1/usage', () => {
  it('sums equal the ledger after a mixed day: by day, by key and by host, in credits and micro-USDC', async () => {
    const res = await get(a1, '/v1/usage');
    expect(res.status).toBe(200);
    const today = new Date().toISOString().slice(0, 10);
    expect(res.body.to).toBe(today);
    expect(res.body.by_day).toHaveLength(30);
    const ledger = await ledgerSums(a1.organisationId);
    const { totals } = res.body;
    expect(totals.credits).toBe(ledger.charge);
    expect(totals.released_credits).toBe(ledger.release);
    expect(totals.pending_credits).toBe(ledger.reserve - ledger.charge - ledger.release);
    expect(totals.granted_credits).toBe(ledger.grant);
    expect(totals.purchased_credits).toBe(ledger.purchase);
    // Balance = grants - reserved + released, as the ledger says.
    const balance = await get(a1, '/v1/credits/balance');
    expect(balance.body.effective_available).toBe(ledger.grant - ledger.reserve + ledger.release);
    expect(totals).toMatchObject({ payments: 4, released_payments: 2, pending_payments: 1 });
    // micro-USDC from the same rows: 10,000 + 12,345 + 7,000 + 1,000 charged.
    expect(totals.amount_micro_usdc).toBe('30345');
    expect(BigInt(totals.fee_micro_usdc)).toBe(BigInt(totals.credits) * 1000n - 30_345n);

    const day = res.body.by_day.find((entry: any) => entry.day === today);
    expect({ ...day, day: undefined }).toEqual({
      ...totals,
      granted_credits: undefined,
      purchased_credits: undefined,
      day: undefined,
    });
    expect(res.body.by_day.filter((entry: any) => entry.day !== today).every((entry: any) => entry.credits === 0)).toBe(
      true,
    );

    for (const key of [a1, a2]) {
      const keyLedger = await ledgerSums(a1.organisationId, key.apiKeyId);
      const entry = res.body.by_key.find((bucket: any) => bucket.key_prefix === key.prefix);
      expect(entry.credits, key.prefix).toBe(keyLedger.charge);
      expect(entry.released_credits).toBe(keyLedger.release);
      expect(entry.pending_credits).toBe(keyLedger.reserve - keyLedger.charge - keyLedger.release);
    }
    expect(res.body.by_key).toHaveLength(2);
    expect(res.body.by_host.map((bucket: any) => bucket.host).sort()).toEqual([
      'maps.example.org',
      'weather.example.com:8443',
    ]);
    const sum = (buckets: any[], name: string) =>
      buckets.reduce((total: number, bucket: Record<string, number>) => total + bucket[name]!, 0);
    for (const name of ['payments', 'credits', 'released_credits', 'pending_credits']) {
      expect(sum(res.body.by_host, name), name).toBe(totals[name]);
      expect(sum(res.body.by_key, name), name).toBe(totals[name]);
    }
    expect(res.body.hosts_truncated).toBe(false);
  });

  it("shows only the organisation's own spend", async () => {
    const res = await get(b1, '/v1/usage');
    expect(res.status).toBe(200);
    const ledger = await ledgerSums(b1.organisationId);
    expect(res.body.totals).toMatchObject({ credits: ledger.charge, payments: 2, granted_credits: 3_000 });
    expect(res.body.by_key.map((bucket: any) => bucket.key_prefix)).toEqual([b1.prefix]);
    expect(res.body.by_host.map((bucket: any) => bucket.host).sort()).toEqual([
      'theirs.example.net',
      'weather.example.com:8443',
    ]);
  });

  it('sums a range of at most 90 days; a longer or reversed range, or an unknown parameter, is a 400', async () => {
    const ninety = await get(a1, '/v1/usage?from=2026-01-01&to=2026-03-31');
    expect(ninety.status).toBe(200);
    expect(ninety.body.by_day).toHaveLength(90);
    expect(ninety.body.totals.credits).toBe(0);
    const long = await get(a1, '/v1/usage?from=2026-01-01&to=2026-04-01');
    expect(long.status).toBe(400);
    expect(long.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: 'The range from 2026-01-01 to 2026-04-01 covers 91 days; at most 90 days are summed at once.',
    });
    expect((await get(a1, '/v1/usage?from=2026-02-01&to=2026-01-31')).status).toBe(400);
    expect((await get(a1, '/v1/usage?from=2026-02-30')).status).toBe(400);
    const unknown = await get(a1, '/v1/usage?key=prs_AAAAAAAAAA');
    expect(unknown.status).toBe(400);
    expect(unknown.body.details).toContain('key');
  });
});
