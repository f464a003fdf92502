// Bad input of the read endpoints, as an adversarial client sends it: a leap second in a date-time,
// an edited cursor, a number not written in decimal digits. Each is a 400 with {error, details}
// checked against the document, never a 500, and nothing changes; every page we serve says
// nosniff.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { NO_LEAP_SECOND } from '../../handlers/getPayments';
import { grantCredits, organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
let db: Db;
let account: TestAccount;

beforeAll(async () => {
  t = await startTestService({ NETWORKS: 'base-sepolia', DISCOVERY: 'public' });
  db = t.database.handle.db;
  account = await createTestAccount(db, { credits: 5_000n });
  await grantCredits(db, account.organisationId, 1_000n, 'second grant');
  await grantCredits(db, account.organisationId, 2_000n, 'third grant');
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

function get(path: string, headers: Record<string, string> = {}) {
  return t.client.get(path, { headers: { 'x-api-key': account.key, ...headers } });
}

/** A 400 of the table's form (the document's check ran in the client) whose details say `words`. */
function expectRefused(res: { status: number; body: any }, words: RegExp, what: string) {
  expect(res.status, what).toBe(400);
  expect(res.body, what).toMatchObject({ code: 'validation_failed', error: 'Bad Request' });
  expect(res.body.details, what).toMatch(words);
}

describe('a leap second in a date-time parameter', () => {
  it.each([
    'from=2026-12-31T23:59:60Z',
    'to=2026-12-31T23:59:60Z',
    'from=2026-12-31T23:59:60.5Z',
    'to=2026-12-31T23:59:60.5Z',
    'from=2026-06-30T23:59:60Z&to=2027-01-01T00:00:00Z',
    'from=2026-12-31T22:59:60-01:00',
  ])('GET /v1/payments?%s is a 400 naming the leap second', async (query) => {
    const [name] = query.split('=');
    expectRefused(
      await get(`/v1/payments?${query.replaceAll('+', '%2B')}`),
      new RegExp(`query\\.${name} must be a date-time with seconds from 00 to 59: a leap second`),
      query,
    );
  });

  it('is refused by the document itself: its pattern of from and to is the one the server checks with', async () => {
    const document = (await t.client.get('/openapi.json')).body;
    const parameters = document.paths['/v1/payments'].get.parameters as Array<Record<string, any>>;
    for (const name of ['from', 'to'])
      expect(parameters.find((parameter) => parameter.name === name)?.schema.pattern).toBe(NO_LEAP_SECOND.source);
  });

  it('a date-time the format lets through but no clock reads (an offset of hours only) is a 400 too', async () => {
    expectRefused(
      await get('/v1/payments?from=2026-01-01T00:00:00%2B01'),
      /^from \(2026-01-01T00:00:00\+01\) is not an instant this service can read/,
      '+01',
    );
  });

  it('every instant of the format from year 0000 to 9999 is read, with no 500', async () => {
    for (const query of [
      'from=0000-01-01T00:00:00Z',
      'to=0000-01-01T00:00:00Z',
      'from=9999-12-31T23:59:59.999999Z',
      'from=2026-01-01t00:00:00z',
      'from=0001-01-01T00:00:00%2B23:59&to=9999-12-31T23:59:59-23:59',
    ]) {
      const res = await get(`/v1/payments?${query}`);
      expect(res.status, query).toBe(200);
    }
    expect((await get('/v1/payments?from=0000-01-01T00:00:00Z')).body.items).toHaveLength(3);
    expect((await get('/v1/payments?to=0000-01-01T00:00:00Z')).body.items).toHaveLength(0);
  });

  it('GET /v1/usage (dates): a day that does not exist is a 400, the first and last days of the format are read', async () => {
    for (const query of ['from=2026-02-30', 'to=2026-13-01', 'from=2025-02-29', 'to=2026-12-32'])
      expectRefused(await get(`/v1/usage?${query}`), /must match format "date"/, query);
    for (const query of [
      'from=0000-01-01&to=0000-03-30',
      'from=9999-10-03&to=9999-12-31',
      'from=2024-02-29&to=2024-02-29',
    ])
      expect((await get(`/v1/usage?${query}`)).status, query).toBe(200);
  });
});

describe('an edited cursor', () => {
  /** A cursor this service gave out, and its fields. */
  async function givenCursor() {
    const page = await get('/v1/payments?limit=1');
    expect(page.status).toBe(200);
    const cursor = page.body.next_cursor as string;
    const fields = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
    expect(fields).toHaveLength(6);
    return fields;
  }
  const encode = (fields: string[]) => Buffer.from(fields.join('|'), 'utf8').toString('base64url');

  it('its organisation and fingerprint kept, a timestamp out of range or an id out of the bigint range: 400', async () => {
    const fields = await givenCursor();
    // The cursor as given works, and so does one pointing at another valid instant.
    expect((await get(`/v1/payments?limit=1&cursor=${encode(fields)}`)).status).toBe(200);
    const elsewhere = [...fields];
    elsewhere[3] = '2024-02-29T23:59:59.999999Z';
    expect((await get(`/v1/payments?limit=1&cursor=${encode(elsewhere)}`)).status).toBe(200);
    const edits: Array<[number, string]> = [
      [3, '2026-02-30T00:00:00.000000Z'],
      [3, '2026-13-01T00:00:00.000000Z'],
      [3, '0000-01-01T00:00:00.000000Z'],
      [3, '2026-12-31T23:59:60.000000Z'],
      [3, '2026-12-31T24:00:00.000000Z'],
      [3, '2026-12-31T23:60:00.000000Z'],
      [3, '2025-02-29T12:00:00.000000Z'],
      [5, '9223372036854775808'],
      [5, '9999999999999999999'],
      [4, '2'],
    ];
    for (const [index, value] of edits) {
      const edited = [...fields];
      edited[index] = value;
      const res = await get(`/v1/payments?limit=1&cursor=${encode(edited)}`);
      expect(res.status, value).toBe(400);
      expect(res.body, value).toEqual({
        code: 'validation_failed',
        error: 'Bad Request',
        details: 'The cursor is not one this service gave out; start again without it.',
      });
    }
    // The largest id there is still reads (nothing after it is skipped, nothing fails).
    const largest = [...fields];
    largest[5] = '9223372036854775807';
    expect((await get(`/v1/payments?limit=1&cursor=${encode(largest)}`)).status).toBe(200);
  });
});

describe('a number not written in decimal digits', () => {
  it.each([
    'limit=0x10',
    'limit=%205',
    'limit=5%20',
    'limit=%2B5',
    'limit=1e1',
    'limit=5.0',
    'limit=0b11',
    'limit=%095',
    'limit=',
  ])('GET /v1/payments?%s is a 400', async (query) => {
    expectRefused(await get(`/v1/payments?${query}`), /query\.limit must be a whole number in decimal digits/, query);
  });

  it('decimal digits are read as before', async () => {
    const res = await get('/v1/payments?limit=2');
    expect(res.status).toBe(200);
    expect(res.body.items).toHaveLength(2);
    expect((await get('/v1/payments?limit=002')).body.items).toHaveLength(2);
    expectRefused(await get('/v1/payments?limit=-1'), /query\.limit must be >= 1/, '-1');
  });

  it('holds for every integer parameter: discovery limit and offset, the X-TIMEOUT header of /proxy', async () => {
    for (const query of ['limit=0x10', 'offset=%201', 'offset=1e2'])
      expect((await t.client.get(`/discovery/resources?${query}`)).status, query).toBe(400);
    expect((await t.client.get('/discovery/resources?limit=10&offset=0')).status).toBe(200);
    const before = await organisationBalance(db, account.organisationId);
    const proxied = await t.client.post(
      '/proxy',
      { url: 'http://127.0.0.1:9/never-called', method: 'GET' },
      { headers: { 'x-api-key': account.key, 'X-TIMEOUT': '0x10' } },
    );
    expectRefused(proxied, /X-TIMEOUT|x-timeout/, 'X-TIMEOUT');
    expect(await organisationBalance(db, account.organisationId)).toBe(before);
    expect(await db.selectFrom('proxy_payments').select('id').execute()).toEqual([]);
  });
});

describe('pages and text answers', () => {
  it.each(['/console', '/docs', '/openapi.json', '/metrics', '/health', '/v1/payments'])(
    'GET %s says X-Content-Type-Options: nosniff',
    async (path) => {
      const res = await get(path);
      expect(res.status).toBeLessThan(300);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    },
  );

  it('so does a refusal', async () => {
    const res = await t.client.get('/v1/payments');
    expect(res.status).toBe(401);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
  });
});
