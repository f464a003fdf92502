// Valid API keys held in memory: served from there only while changes are announced by Postgres,
// dropped as soon as a change is announced, and never stored from a read that a change overtook.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { listenTo, type ChannelListener } from '../../db/notify';
import {
  API_KEY_CHANGES_CHANNEL,
  ApiKeyCache,
  authenticateKey,
  revokeApiKey,
  type AuthenticatedKey,
} from '../../payments/accounts/accounts';
import { createTestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';
import { NO_POLICY } from '../../payments/accounts/policy';

let database: TestDatabase;
let db: Db;

beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await ifStarted(database)?.drop();
});

/** A database handle that fails the test if anything reads it: proof that an answer came from memory. */
const unreachableDb = new Proxy(
  {},
  {
    get() {
      throw new Error('the database was read');
    },
  },
) as unknown as Db;

async function listeningCache(ttlMs = 60_000): Promise<{ cache: ApiKeyCache; listener: ChannelListener }> {
  const cache = new ApiKeyCache(ttlMs);
  const listener = listenTo(database.url, API_KEY_CHANGES_CHANNEL, {
    onNotify: (prefix) => cache.changed(prefix),
    onState: (listening) => cache.setListening(listening),
  });
  const deadline = Date.now() + 30_000;
  while (!listener.listening()) {
    if (Date.now() > deadline) throw new Error('the listener did not start');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return { cache, listener };
}

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

describe('the API key cache', () => {
  it('answers a key it has read from memory while changes are announced', async () => {
    const { cache, listener } = await listeningCache();
    const account = await createTestAccount(db);
    const first = await authenticateKey(db, account.key, cache);
    expect(first).toMatchObject({ ok: true, key: { apiKeyId: account.apiKeyId, prefix: account.prefix } });
    const second = await authenticateKey(unreachableDb, account.key, cache);
    expect(second).toEqual(first);
    // A wrong secret with the same prefix is never answered from memory.
    const forged = `${account.prefix}_${'A'.repeat(32)}`;
    expect(await authenticateKey(db, forged, cache)).toEqual({ ok: false, reason: 'unknown' });
    await listener.stop();
  });

  it('a revocation committed elsewhere drops the key at once, long before its time in memory ends', async () => {
    // Kept ten minutes in memory; waited for a minute at most (a loaded machine is slow, not wrong).
    const { cache, listener } = await listeningCache(600_000);
    const account = await createTestAccount(db);
    expect((await authenticateKey(db, account.key, cache)).ok).toBe(true);
    expect(cache.size).toBe(1);
    await revokeApiKey(db, account.prefix);
    const { value } = await within(
      60_000,
      () => authenticateKey(db, account.key, cache),
      (result) => !result.ok,
    );
    expect(value).toEqual({ ok: false, reason: 'revoked' });
    await listener.stop();
  });

  it('a changed daily cap is read again', async () => {
    const { cache, listener } = await listeningCache();
    const account = await createTestAccount(db, { dailyCapCredits: 100n });
    expect(await authenticateKey(db, account.key, cache)).toMatchObject({ key: { dailyCapCredits: 100n } });
    await db.updateTable('api_keys').set({ daily_cap_credits: 250n }).where('id', '=', account.apiKeyId).execute();
    const { value } = await within(
      2_000,
      () => authenticateKey(db, account.key, cache),
      (result) => result.ok && result.key.dailyCapCredits === 250n,
    );
    expect(value).toMatchObject({ ok: true, key: { dailyCapCredits: 250n } });
    await listener.stop();
  });

  it('serves nothing from memory while no notifications arrive', async () => {
    const { cache, listener } = await listeningCache();
    const account = await createTestAccount(db);
    await authenticateKey(db, account.key, cache);
    cache.setListening(false);
    expect(cache.size).toBe(0);
    await expect(authenticateKey(unreachableDb, account.key, cache)).rejects.toThrow('the database was read');
    await revokeApiKey(db, account.prefix);
    expect(await authenticateKey(db, account.key, cache)).toEqual({ ok: false, reason: 'revoked' });
    await listener.stop();
  });

  it('does not store what a read found when a change was announced during that read', () => {
    let now = 0;
    const cache = new ApiKeyCache(1_000, 10, () => now);
    cache.setListening(true);
    const key = {
      apiKeyId: 1n,
      prefix: 'prs_aaaaaaaaaa',
      dailyCapCredits: 1n,
      accountId: 1n,
      accountPublicId: 'a',
      organisationId: 1n,
      policy: NO_POLICY,
    } satisfies AuthenticatedKey;
    const generation = cache.begin();
    cache.changed('prs_bbbbbbbbbb');
    cache.store('hash', key, generation);
    expect(cache.find('hash')).toBeUndefined();
    cache.store('hash', key, cache.begin());
    expect(cache.find('hash')).toEqual(key);
    now = 1_000;
    expect(cache.find('hash')).toBeUndefined();
  });

  it('holds at most its bound of keys', () => {
    const cache = new ApiKeyCache(1_000, 2, () => 0);
    cache.setListening(true);
    const key = (id: bigint) => ({
      apiKeyId: id,
      prefix: `prs_${id}`,
      dailyCapCredits: 1n,
      accountId: 1n,
      accountPublicId: 'a',
      organisationId: 1n,
      policy: NO_POLICY,
    });
    for (const id of [1n, 2n, 3n]) cache.store(`h${id}`, key(id), cache.begin());
    expect(cache.size).toBe(2);
    expect(cache.find('h1')).toBeUndefined();
    expect(cache.find('h3')).toEqual(key(3n));
  });
});
