import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../support/service';
import { createTestAccount, revokedKey } from '../support/accounts';

let t: TestService;
let revoked: string;
let valid: string;
beforeAll(async () => {
  t = await startTestService();
  revoked = await revokedKey(t.database.handle.db);
  valid = (await createTestAccount(t.database.handle.db)).key;
});
afterAll(async () => {
  await t?.stop();
});

// A loopback address that is not allow-listed: an admitted call is refused by the SSRF guard (400)
// before any name is resolved or any byte is sent, so these tests never reach a real host.
const callBody = { api_url: 'http://127.0.0.1:9/data', method: 'GET' };

/** Every operation secured by x-api-key, with a request that is otherwise valid. */
const ACCOUNT_OPERATIONS: Array<[string, string, unknown]> = [
  ['GET', '/balance', undefined],
  ['GET', '/v1/credits/balance', undefined],
  ['POST', '/proxy', callBody],
  ['POST', '/proxy/sim', callBody],
];

describe.each(ACCOUNT_OPERATIONS)('%s %s credentials', (method, path, body) => {
  it('refuses a missing key with 401', async () => {
    const res = await t.client.request(method, path, { body });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ code: 'unauthorized', error: 'Unauthorized', details: 'The x-api-key header is required.' });
  });

  it('refuses an unknown key with 401', async () => {
    const res = await t.client.request(method, path, { body, headers: { 'x-api-key': `prs_AAAAAAAAAA_${'B'.repeat(32)}` } });
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
    if (body !== undefined) expect(res.status).toBe(400);
  });
});
