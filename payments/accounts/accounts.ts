/**
 * Organisations, accounts and API keys. A key is shown once when created and stored only as a
 * SHA-256 hash; its prefix identifies it in listings and in GET /v1/credits/balance.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Db, Tx } from '../../db/index';
import type { KeyPolicy } from './policy';

const KEY_ALPHABET = 'abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789';
const KEY_ID_LENGTH = 10;
const KEY_SECRET_LENGTH = 32;
/** The key looks like prs_<id>_<secret>; its prefix is prs_<id>. */
const KEY_PATTERN = /^prs_([A-Za-z0-9]{10})_([A-Za-z0-9]{32})$/;

function randomText(length: number): string {
  const bytes = randomBytes(length * 2);
  let out = '';
  // Rejection sampling keeps every character equally likely.
  for (const byte of bytes) {
    if (byte >= 256 - (256 % KEY_ALPHABET.length)) continue;
    out += KEY_ALPHABET.charAt(byte % KEY_ALPHABET.length);
    if (out.length === length) return out;
  }
  return out + randomText(length - out.length);
}

function hashKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

function newApiKey(): { key: string; prefix: string } {
  const prefix = `prs_${randomText(KEY_ID_LENGTH)}`;
  return { key: `${prefix}_${randomText(KEY_SECRET_LENGTH)}`, prefix };
}

export interface AuthenticatedKey {
  apiKeyId: bigint;
  prefix: string;
  dailyCapCredits: bigint;
  accountId: bigint;
  accountPublicId: string;
  organisationId: bigint;
  /** Its ceilings per call and allowed hosts on /proxy (payments/accounts/policy.ts). */
  policy: KeyPolicy;
}

export type KeyRejection = 'missing' | 'malformed' | 'unknown' | 'revoked';

/** The channel db/migrations/..._api_key_notify announces key and account changes on. */
export const API_KEY_CHANGES_CHANNEL = 'api_keys_changed';

/**
 * Valid keys kept in memory for a short while, so that a call does not read Postgres to learn
 * what it learnt a moment ago. Only while the owner reports that change notifications arrive
 * (`setListening(true)`): a change announced on API_KEY_CHANGES_CHANNEL drops the key at once;
 * without notifications nothing is served from memory. `ttlMs` bounds an entry's life in any case.
 * Entries are found by the key's SHA-256; the key itself is never kept. A lookup that started
 * before a change cannot store what it read afterwards (the generation check).
 */
export class ApiKeyCache {
  private readonly entries = new Map<string, { key: AuthenticatedKey; expiresAt: number }>();
  private generation = 0;
  private listening = false;

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
    private readonly now: () => number = () => performance.now(),
  ) {}

  setListening(listening: boolean): void {
    this.listening = listening;
    this.changed('*');
  }

  /** A key (by prefix) or, with '*', every key may have changed. */
  changed(prefix: string): void {
    this.generation += 1;
    if (prefix === '*' || prefix === '') {
      this.entries.clear();
      return;
    }
    for (const [hash, entry] of this.entries) if (entry.key.prefix === prefix) this.entries.delete(hash);
  }

  get size(): number {
    return this.entries.size;
  }

  /** @internal for authenticateKey */
  find(hash: string): AuthenticatedKey | undefined {
    if (!this.listening || this.ttlMs <= 0) return undefined;
    const entry = this.entries.get(hash);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.entries.delete(hash);
      return undefined;
    }
    return entry.key;
  }

  /** @internal for authenticateKey: the generation before its read of the database. */
  begin(): number {
    return this.generation;
  }

  /** @internal for authenticateKey */
  store(hash: string, key: AuthenticatedKey, generation: number): void {
    if (!this.listening || this.ttlMs <= 0 || generation !== this.generation) return;
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(hash, { key, expiresAt: this.now() + this.ttlMs });
  }
}

export async function authenticateKey(
  db: Db,
  presented: string | undefined,
  cache?: ApiKeyCache,
): Promise<{ ok: true; key: AuthenticatedKey } | { ok: false; reason: KeyRejection }> {
  if (presented === undefined || presented === '') return { ok: false, reason: 'missing' };
  const match = KEY_PATTERN.exec(presented);
  if (!match) return { ok: false, reason: 'malformed' };
  const prefix = `prs_${match[1]}`;
  const presentedHash = hashKey(presented);
  const cacheId = cache ? presentedHash.toString('base64') : '';
  const cached = cache?.find(cacheId);
  if (cached) return { ok: true, key: cached };
  const generation = cache?.begin() ?? 0;
  const rows = await db
    .selectFrom('api_keys')
    .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
    .select([
      'api_keys.id',
      'api_keys.key_hash',
      'api_keys.daily_cap_credits',
      'api_keys.revoked_at',
      'api_keys.default_max_micro_usdc',
      'api_keys.hard_max_micro_usdc',
      'api_keys.allowed_hosts',
      'accounts.id as account_id',
      'accounts.public_id',
      'accounts.organisation_id',
    ])
    .where('api_keys.prefix', '=', prefix)
    .execute();
  // The hash is compared in constant time; the prefix alone proves nothing.
  const row = rows.find((candidate) => timingSafeEqual(candidate.key_hash, presentedHash));
  if (!row) return { ok: false, reason: 'unknown' };
  if (row.revoked_at !== null) return { ok: false, reason: 'revoked' };
  const key: AuthenticatedKey = {
    apiKeyId: row.id,
    prefix,
    dailyCapCredits: row.daily_cap_credits,
    accountId: row.account_id,
    accountPublicId: row.public_id,
    organisationId: row.organisation_id,
    policy: {
      defaultMaxMicroUsdc: row.default_max_micro_usdc,
      hardMaxMicroUsdc: row.hard_max_micro_usdc,
      allowedHosts: row.allowed_hosts,
    },
  };
  cache?.store(cacheId, key, generation);
  return { ok: true, key };
}

export async function createOrganisation(
  db: Db,
  name: string,
): Promise<{ organisationId: bigint; accountId: bigint; accountPublicId: string }> {
  return db.transaction().execute(async (tx) => {
    const organisation = await tx
      .insertInto('organisations')
      .values({ name })
      .returning('id')
      .executeTakeFirstOrThrow();
    const account = await tx
      .insertInto('accounts')
      .values({ organisation_id: organisation.id, name: 'default' })
      .returning(['id', 'public_id'])
      .executeTakeFirstOrThrow();
    return { organisationId: organisation.id, accountId: account.id, accountPublicId: account.public_id };
  });
}

export async function createApiKey(
  db: Db | Tx,
  accountId: bigint,
  dailyCapCredits: bigint,
): Promise<{ apiKeyId: bigint; key: string; prefix: string }> {
  const { key, prefix } = newApiKey();
  const row = await db
    .insertInto('api_keys')
    .values({ account_id: accountId, prefix, key_hash: hashKey(key), daily_cap_credits: dailyCapCredits })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { apiKeyId: row.id, key, prefix };
}

/** Revokes by prefix; returns false when no active key has it. */
export async function revokeApiKey(db: Db, prefix: string): Promise<boolean> {
  const result = await db
    .updateTable('api_keys')
    .set({ revoked_at: new Date() })
    .where('prefix', '=', prefix)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Sets the policy of the active key with this prefix (every rule at once: a null clears it).
 * Returns false when no active key has the prefix. The update is announced on
 * API_KEY_CHANGES_CHANNEL, so that every instance's cached key takes it at once.
 */
export async function setKeyPolicy(db: Db, prefix: string, policy: KeyPolicy): Promise<boolean> {
  const result = await db
    .updateTable('api_keys')
    .set({
      default_max_micro_usdc: policy.defaultMaxMicroUsdc,
      hard_max_micro_usdc: policy.hardMaxMicroUsdc,
      allowed_hosts: policy.allowedHosts === null ? null : [...policy.allowedHosts],
    })
    .where('prefix', '=', prefix)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
