// The credential cases every operation secured by x-api-key must pass, written once and run for
// each of them: POST /proxy, POST /proxy/sim, GET /balance, GET /v1/credits/balance, GET /v1/payments
// and GET /v1/usage.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../support/service';
import { createTestAccount, revokedKey, type TestAccount } from '../support/accounts';
import { ifStarted } from '../support/teardown';

let t: TestService;
let revoked: string;
let valid: string;
let mine: TestAccount;
let theirs: TestAccount;
beforeAll(async () => {
  t = await startTestService();
  const { db } = t.database.handle;
  revoked = await revokedKey(db);
  valid = (await createTestAccount(db)).key;
  mine = await createTestAccount(db, { credits: 1_111n, dailyCapCredits: 2_000n });
  theirs = await createTestAccount(db, { credits: 7_777n, dailyCapCredits: 9_000n });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

// A loopback address that is not allow-listed: an admitted call is refused by the SSRF guard (400)
// before any name is resolved or any byte is sent, so these tests never reach a real host.
const callBody = { api_url: 'http://127.0.0.1:9/data', method: 'GET' };

interface AccountOperation {
  method: string;
  path: string;
  body: unknown;
  /** For an operation that answers about the key's account: what of the answer names that account. */
  ownAccount?: (account: TestAccount) => Record<string, unknown>;
  /** What an admitted request is answered, when not the SSRF guard's 400 (a purchase without payment: 402). */
  admittedStatus?: number;
}

/** Every operation secured by x-api-key, with a request that is otherwise valid. */
const ACCOUNT_OPERATIONS: Array<[string, string, AccountOperation]> = [
  [
    'GET',
    '/balance',
    {
      method: 'GET',
      path: '/balance',
      body: undefined,
      ownAccount: (account) => ({ account_id: account.accountPublicId }),
    },
  ],
  [
    'GET',
    '/v1/credits/balance',
    {
      method: 'GET',
      path: '/v1/credits/balance',
      body: undefined,
      ownAccount: (account) => ({ key_prefix: account.prefix }),
    },
  ],
  ['GET', '/v1/payments', { method: 'GET', path: '/v1/payments', body: undefined }],
  ['GET', '/v1/usage', { method: 'GET', path: '/v1/usage', body: undefined }],
  ['POST', '/proxy', { method: 'POST', path: '/proxy', body: callBody }],
  ['POST', '/proxy/sim', { method: 'POST', path: '/proxy/sim', body: callBody }],
  [
    'POST',
    '/v1/credits/purchase',
    { method: 'POST', path: '/v1/credits/purchase', body: { credits: 10 }, admittedStatus: 402 },
  ],
];

describe.each(ACCOUNT_OPERATIONS)('%s %s credentials', (_method, _path, { method, path, body, admittedStatus }) => {
  it('refuses a missing key with 401', async () => {
    const res = await t.client.request(method, path, { body });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({
      code: 'unauthorized',
      error: 'Unauthorized',
      details: 'The x-api-key header is required.',
    });
  });

  it('refuses an empty key with 401', async () => {
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': '' } });
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ code: 'unauthorized', error: 'Unauthorized' });
  });

  it('refuses an unknown key with 401', async () => {
    const res = await t.client.request(method, path, {
      body,
      headers: { 'x-api-key': `prs_AAAAAAAAAA_${'B'.repeat(32)}` },
    });
    expect(res.status).toBe(401);
    expect(res.body.details).toBe('The API key is not known.');
  });

  it('refuses a key of another shape with 401', async () => {
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': 'sk-live-123' } });
    expect(res.status).toBe(401);
  });

  it('refuses a revoked key with 401', async () => {
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': revoked } });
    expect(res.status).toBe(401);
    expect(res.body.details).toBe('The API key has been revoked.');
  });

  it('refuses a valid key with one character changed', async () => {
    const tampered = valid.slice(0, -1) + (valid.endsWith('a') ? 'b' : 'a');
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': tampered } });
    expect(res.status).toBe(401);
  });

  it('admits a valid key', async () => {
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': valid } });
    expect(res.status).not.toBe(401);
    if (body !== undefined) expect(res.status).toBe(admittedStatus ?? 400);
  });
});

// The operations that answer about the key's account: another account's key gets that account's
// answer, never this one's (POST /proxy and /proxy/sim answer about the call, not the account).
const ANSWERING = ACCOUNT_OPERATIONS.filter(([, , operation]) => operation.ownAccount !== undefined);

describe.each(ANSWERING)(
  '%s %s with the key of another account',
  (_method, _path, { method, path, body, ownAccount }) => {
    it("answers about the key's own account, never another's", async () => {
      const asMine = await t.client.request(method, path, { body, headers: { 'x-api-key': mine.key } });
      const asTheirs = await t.client.request(method, path, { body, headers: { 'x-api-key': theirs.key } });
      expect([asMine.status, asTheirs.status]).toEqual([200, 200]);
      expect(asMine.body).toMatchObject(ownAccount!(mine));
      expect(asTheirs.body).toMatchObject(ownAccount!(theirs));
      expect(asMine.body).not.toEqual(asTheirs.body);
    });
  },
);
