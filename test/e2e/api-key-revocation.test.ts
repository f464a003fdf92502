// A key revoked while the service holds it in memory: the service's cache hears of the change from
// Postgres and refuses the key within moments.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { revokeApiKey } from '../../payments/accounts/accounts';
import { createTestAccount } from '../support/accounts';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

async function within<T>(
  ms: number,
  probe: () => Promise<T>,
  done: (value: T) => boolean,
): Promise<{ value: T; elapsedMs: number }> {
  const started = Date.now();
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() - started > ms) return { value, elapsedMs: Date.now() - started };
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('the API key cache through the service', () => {
  let t: TestService;
  beforeAll(async () => {
    // Keys kept ten minutes in memory: a refusal within the test's bound comes from the announcement.
    t = await startTestService({ API_KEY_CACHE_MS: '600000' });
  });
  afterAll(async () => {
    await ifStarted(t)?.stop();
  });

  it('a key revoked while in use is refused with 401 within moments', async () => {
    const account = await createTestAccount(t.database.handle.db, { credits: 10n });
    const headers = { 'x-api-key': account.key };
    expect((await t.client.get('/balance', { headers })).status).toBe(200);
    expect((await t.client.get('/balance', { headers })).status).toBe(200);
    await revokeApiKey(t.database.handle.db, account.prefix);
    // Waited for a minute at most (a loaded machine is slow, not wrong), far less than the cache's ten.
    const { value } = await within(
      60_000,
      () => t.client.get('/balance', { headers }),
      (response) => response.status === 401,
    );
    expect(value.status).toBe(401);
    expect(value.body).toEqual({
      code: 'unauthorized',
      error: 'Unauthorized',
      details: 'The API key has been revoked.',
    });
  });
});
