/**
 * Retries after a lost answer (docs/decisions.md, "Idempotency-Key and repeated payments"). A paid
 * call is claimed under (scope, key) before it starts; its answer is kept once it ends; a repeat of
 * the same request under the same key gets that answer and moves no money, a repeat while the
 * first still runs is told so, and the same key with another request is refused.
 *
 * Scopes: `proxy:<account id>` (the Idempotency-Key of /proxy), `relay:<payer>` (the key of /relay,
 * per paying EVM wallet), `relay-payment:<sha-256 of the payment>` (the key of /relay paid on
 * Solana, per payment), and `relay-nonce` for a /relay payment sent without a key, the payment
 * itself being the key (its version, network and authorization nonce or signed transaction).
 *
 * A record is `running` from the claim until the call's answer is written (`finished`). The claim
 * is one statement: a record whose expiry has passed counts as absent and is taken over. A record
 * left running by a process that stopped stays running until it expires: a repeat is then told the
 * call is running (the jobs finish its money), never run a second time.
 */
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '../db/index';

/** How long a kept answer is replayed: 24 hours from the first call. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

/** Idempotency-Key: 1 to 255 printable ASCII characters without spaces (a UUID fits). */
export const IDEMPOTENCY_KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/**
 * The largest body kept: above any answer of /proxy or /relay (a target's answer is at most 10 MiB,
 * and its format=json wrapping escapes it). A larger one is kept as a 500 saying so.
 */
export const MAX_KEPT_BODY_BYTES = 24 * 1024 * 1024;

/** Seconds a repeat waits before asking again while the first call runs. */
export const RUNNING_RETRY_AFTER_SECONDS = 2;

export interface KeptAnswer {
  status: number;
  contentType: string;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

export interface IdempotencyScope {
  scope: string;
  key: string;
}

export type Claim =
  /** Ours to run; finish or release it. */
  | { kind: 'claimed' }
  /** The same request finished: its answer, and the payment its first call carried (keyed /relay). */
  | { kind: 'finished'; answer: KeptAnswer; payment: string | null }
  /** The same request still runs. */
  | { kind: 'running'; payment: string | null }
  /** The key was first used with another request. */
  | { kind: 'other_request' };

export type KeyRead = { ok: true; key: string | undefined } | { ok: false; details: string };

/** The Idempotency-Key header: absent, or one value of the allowed length and characters. */
export function readIdempotencyKey(header: string | string[] | undefined): KeyRead {
  if (header === undefined) return { ok: true, key: undefined };
  if (Array.isArray(header)) return { ok: false, details: 'Idempotency-Key was sent more than once; send one key' };
  if (!IDEMPOTENCY_KEY_PATTERN.test(header))
    return {
      ok: false,
      details: `Idempotency-Key must be 1 to 255 printable ASCII characters without spaces (got ${header.length} characters)`,
    };
  return { ok: true, key: header };
}

export function sha256Hex(value: string | Buffer): string {
  return createHash('sha256').update(value).digest('hex');
}

/**
 * The request a key is bound to: method, path with the query that shapes the answer, and the hash
 * of the body as parsed (the same JSON, whatever its spacing, is the same request).
 */
export function requestFingerprint(request: { method: string; path: string; body: unknown }): string {
  return `${request.method.toUpperCase()} ${request.path} ${sha256Hex(JSON.stringify(request.body ?? null))}`;
}

interface RecordRow {
  fingerprint: string;
  payment: string | null;
  state: 'running' | 'finished';
  status: number | null;
  content_type: string | null;
  headers: Record<string, string | string[]> | null;
  body: Buffer | null;
}

/**
 * Claims (scope, key) for a request: a new or expired record becomes ours (`running`); otherwise
 * the record says what the first call with that key did.
 */
export async function claimIdempotencyKey(
  db: Db,
  id: IdempotencyScope,
  fingerprint: string,
  options: { payment?: string; ttlMs?: number } = {},
): Promise<Claim> {
  const ttlMs = options.ttlMs ?? IDEMPOTENCY_TTL_MS;
  const payment = options.payment ?? null;
  for (let attempt = 0; attempt < 3; attempt += 1) {
    const claimed = await sql<{ claimed: boolean }>`
      insert into idempotency_records (scope, key, fingerprint, payment, state, expires_at)
      values (${id.scope}, ${id.key}, ${fingerprint}, ${payment}, 'running', now() + ${`${ttlMs} milliseconds`}::interval)
      on conflict (scope, key) do update set
        fingerprint = excluded.fingerprint, payment = excluded.payment, state = 'running', status = null, content_type = null,
        headers = null, body = null, created_at = now(), finished_at = null, expires_at = excluded.expires_at
      where idempotency_records.expires_at <= now()
      returning true as claimed`.execute(db);
    if (claimed.rows.length > 0) return { kind: 'claimed' };
    const existing = await sql<RecordRow>`
      select fingerprint, payment, state, status, content_type, headers, body from idempotency_records
      where scope = ${id.scope} and key = ${id.key} and expires_at > now()`.execute(db);
    const row = existing.rows[0];
    // Expired (or pruned) between the two statements: claim again.
    if (row === undefined) continue;
    if (row.fingerprint !== fingerprint) return { kind: 'other_request' };
    if (row.state === 'running' || row.status === null || row.body === null)
      return { kind: 'running', payment: row.payment };
    return {
      kind: 'finished',
      answer: {
        status: row.status,
        contentType: row.content_type ?? 'application/octet-stream',
        headers: row.headers ?? {},
        body: row.body,
      },
      payment: row.payment,
    };
  }
  throw new Error(`idempotency record ${id.scope}/${id.key} could not be claimed`);
}

/** Keeps the answer of a claimed call; a repeat gets it byte for byte until the record expires. */
export async function finishIdempotencyKey(db: Db, id: IdempotencyScope, answer: KeptAnswer): Promise<void> {
  await db
    .updateTable('idempotency_records')
    .set({
      state: 'finished',
      status: answer.status,
      content_type: answer.contentType,
      headers: JSON.stringify(answer.headers),
      body: answer.body,
      finished_at: sql<Date>`now()`,
    })
    .where('scope', '=', id.scope)
    .where('key', '=', id.key)
    .where('state', '=', 'running')
    .execute();
}

/** Frees a claimed key whose call moved nothing: a retry runs the call anew. */
export async function releaseIdempotencyKey(db: Db, id: IdempotencyScope): Promise<void> {
  await db
    .deleteFrom('idempotency_records')
    .where('scope', '=', id.scope)
    .where('key', '=', id.key)
    .where('state', '=', 'running')
    .execute();
}

/** Deletes expired records (the idempotency_prune job); returns how many. */
export async function pruneIdempotencyRecords(db: Db, limit = 10_000): Promise<number> {
  const result = await sql`
    delete from idempotency_records where ctid in (
      select ctid from idempotency_records where expires_at <= now() limit ${limit})`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}
