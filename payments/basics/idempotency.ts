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
 * is one statement: a record whose expiry has passed counts as absent and is taken over.
 *
 * Each claim has an id of its own (`claim`), the instance that runs it (`owner`) and a lease that
 * instance renews while it lives (renewIdempotencyLeases, every third of IDEMPOTENCY_LEASE_MS). The
 * money records of the call carry the claim, written in the statement that records the money, and
 * only while the claim is still the record's (holdIdempotencyClaim). A repeat that finds the record
 * running with its lease lapsed knows the process died, and reads those records under a row lock:
 * none (nothing moved) -> the repeat takes the claim over and runs the call; some still open -> 409,
 * the jobs finish them; all ended -> the repeat is answered from them (`ended`) and that answer is
 * kept. The call is never run twice while money of its first run exists, and money never moves twice.
 */
import { createHash, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, Tx } from '../../db/index';
import type { ProxyPaymentState, RelayTransactionState } from '../../db/schema';
import { runPrepared } from '../../db/prepared';
import { fail, ok, type Result } from './result';

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

/** One claim of a record: the money records of the call carry `claim`. */
export interface ClaimRef extends IdempotencyScope {
  claim: string;
}

/** The instance that claims, and how long its claims stay its own without a renewal. */
export interface ClaimOwner {
  instanceId: string;
  leaseMs: number;
}

/** The money of a call whose process died, once the jobs have ended it. */
export type EndedMoney =
  | {
      kind: 'relay';
      relayTxId: bigint;
      state: Extract<RelayTransactionState, 'delivered' | 'refunded' | 'settle_failed' | 'refund_failed'>;
      network: string;
      amountMicro: bigint;
      webhookId: string | null;
      clientTxHash: string | null;
      targetStatus: number | null;
      targetTxHash: string | null;
    }
  | {
      kind: 'proxy';
      /** Credits charged for payments the chain used (0 when every payment was released). */
      chargedCredits: bigint;
      txHashes: string[];
      webhookId: string | null;
    };

export type Claim =
  /** Ours to run (a new claim, or one taken over from a process that died before any money moved); finish or release it. */
  | { kind: 'claimed'; ref: ClaimRef }
  /** The first call's process died and its money has ended: answer from it, and keep that answer under `ref`. */
  | { kind: 'ended'; ref: ClaimRef; money: EndedMoney; payment: string | null }
  /** The same request finished: its answer, and the payment its first call carried (keyed /relay). */
  | { kind: 'finished'; answer: KeptAnswer; payment: string | null }
  /** The same request still runs. */
  | { kind: 'running'; payment: string | null }
  /** The key was first used with another request. */
  | { kind: 'other_request' };

export type KeyRead = Result<string | undefined, 'invalid_idempotency_key'>;

/** The Idempotency-Key header: absent, or one value of the allowed length and characters. */
export function readIdempotencyKey(header: string | string[] | undefined): KeyRead {
  if (header === undefined) return ok(undefined);
  if (Array.isArray(header))
    return fail('invalid_idempotency_key', 'Idempotency-Key was sent more than once; send one key');
  if (!IDEMPOTENCY_KEY_PATTERN.test(header))
    return fail(
      'invalid_idempotency_key',
      `Idempotency-Key must be 1 to 255 printable ASCII characters without spaces (got ${header.length} characters)`,
    );
  return ok(header);
}

/**
 * The key a paid call runs under: its Idempotency-Key, or the id its payment carries in the
 * payment-identifier extension (the same meaning); both at once must be the same key.
 */
export function callIdempotencyKey(
  header: string | undefined,
  paymentId: string | undefined,
): Result<string | undefined, 'conflicting_idempotency_keys'> {
  if (header !== undefined && paymentId !== undefined && header !== paymentId)
    return fail(
      'conflicting_idempotency_keys',
      "Idempotency-Key and the payment's payment-identifier id differ: they name the same thing, so send one of them, or the same value in both",
    );
  return ok(header ?? paymentId);
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
  claim: string | null;
  lapsed: boolean;
}

/** The lease of an instance that does not say otherwise (IDEMPOTENCY_LEASE_MS). */
export const DEFAULT_IDEMPOTENCY_LEASE_MS = 30_000;

const TERMINAL_RELAY: ReadonlySet<RelayTransactionState> = new Set([
  'delivered',
  'refunded',
  'settle_failed',
  'refund_failed',
]);
const TERMINAL_PROXY: ReadonlySet<ProxyPaymentState> = new Set(['charged', 'released']);

export class IdempotencyClaimLost extends Error {
  constructor(readonly ref: ClaimRef) {
    super(`the claim of idempotency record ${ref.scope}/${ref.key} was taken over; nothing is recorded under it`);
  }
}

/**
 * Inside the transaction that records money for a claimed call: the claim must still be the
 * record's, else IdempotencyClaimLost is thrown and the transaction writes nothing. A repeat takes
 * a lapsed claim over only under FOR UPDATE, which waits for this lock and then sees the money
 * recorded here; FOR KEY SHARE lets the lease renewals and the answer's write (updates of no key)
 * go on beside it.
 */
export async function holdIdempotencyClaim(tx: Tx, ref: ClaimRef): Promise<void> {
  const held = await sql<{ held: number }>`
    select 1 as held from idempotency_records
    where scope = ${ref.scope} and key = ${ref.key} and claim = ${ref.claim} and state = 'running'
    for key share`.execute(tx);
  if (held.rows.length === 0) throw new IdempotencyClaimLost(ref);
}

/** Renews the leases of every call this instance runs; returns how many. */
export async function renewIdempotencyLeases(db: Db, owner: ClaimOwner): Promise<number> {
  const result = await sql`
    update idempotency_records set lease_expires_at = now() + ${`${owner.leaseMs} milliseconds`}::interval
    where owner = ${owner.instanceId} and state = 'running'`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}

type Lapsed = { kind: 'claimed'; ref: ClaimRef } | { kind: 'running' } | { kind: 'ended'; money: EndedMoney };

/**
 * A running record whose owner stopped renewing its lease: under the record's row lock (which
 * holdIdempotencyClaim shares), the money records of its claim decide. Undefined when the record
 * changed meanwhile (the caller reads it again).
 */
async function resolveLapsed(
  db: Db,
  id: IdempotencyScope,
  lapsedClaim: string,
  owner: ClaimOwner,
  payment: string | null,
): Promise<Lapsed | undefined> {
  return db.transaction().execute(async (tx) => {
    const locked = await sql<{ claim: string }>`
      select claim from idempotency_records
      where scope = ${id.scope} and key = ${id.key} and claim = ${lapsedClaim} and state = 'running'
        and lease_expires_at <= now() and expires_at > now()
      for update`.execute(tx);
    if (locked.rows.length === 0) return undefined;
    const relay = await tx
      .selectFrom('relay_transactions')
      .select([
        'id',
        'state',
        'network',
        'amount_micro',
        'webhook_id',
        'client_tx_hash',
        'target_status',
        'target_tx_hash',
      ])
      .where('idempotency_claim', '=', lapsedClaim)
      .orderBy('id')
      .execute();
    const proxy = await tx
      .selectFrom('proxy_payments')
      .select(['state', 'credits', 'tx_hash', 'webhook_id'])
      .where('idempotency_claim', '=', lapsedClaim)
      .orderBy('id')
      .execute();
    if (relay.length === 0 && proxy.length === 0) {
      const ref = { ...id, claim: randomUUID() };
      await sql`
        update idempotency_records set claim = ${ref.claim}, owner = ${owner.instanceId}, payment = ${payment},
          lease_expires_at = now() + ${`${owner.leaseMs} milliseconds`}::interval
        where scope = ${id.scope} and key = ${id.key}`.execute(tx);
      return { kind: 'claimed', ref };
    }
    if (relay.some((row) => !TERMINAL_RELAY.has(row.state)) || proxy.some((row) => !TERMINAL_PROXY.has(row.state)))
      return { kind: 'running' };
    const last = relay.at(-1);
    if (last !== undefined)
      return {
        kind: 'ended',
        money: {
          kind: 'relay',
          relayTxId: last.id,
          state: last.state as Extract<EndedMoney, { kind: 'relay' }>['state'],
          network: last.network,
          amountMicro: last.amount_micro,
          webhookId: last.webhook_id,
          clientTxHash: last.client_tx_hash,
          targetStatus: last.target_status,
          targetTxHash: last.target_tx_hash,
        },
      };
    const charged = proxy.filter((row) => row.state === 'charged');
    return {
      kind: 'ended',
      money: {
        kind: 'proxy',
        chargedCredits: charged.reduce((sum, row) => sum + row.credits, 0n),
        txHashes: charged.flatMap((row) => (row.tx_hash ? [row.tx_hash] : [])),
        webhookId: proxy.findLast((row) => row.webhook_id !== null)?.webhook_id ?? null,
      },
    };
  });
}

/**
 * Claims (scope, key) for a request: a new or expired record becomes ours (`running`, under a new
 * claim owned by `owner`); otherwise the record says what the first call with that key did. A
 * running record whose lease lapsed is resolved from its money (resolveLapsed).
 */
export async function claimIdempotencyKey(
  db: Db,
  id: IdempotencyScope,
  fingerprint: string,
  options: { payment?: string; ttlMs?: number; owner?: ClaimOwner } = {},
): Promise<Claim> {
  const ttlMs = options.ttlMs ?? IDEMPOTENCY_TTL_MS;
  const owner = options.owner ?? { instanceId: 'unnamed', leaseMs: DEFAULT_IDEMPOTENCY_LEASE_MS };
  const payment = options.payment ?? null;
  for (let attempt = 0; attempt < 5; attempt += 1) {
    const claim = randomUUID();
    const claiming = sql<{ claimed: boolean }>`
      insert into idempotency_records (scope, key, fingerprint, payment, state, expires_at, claim, owner, lease_expires_at)
      values (${id.scope}, ${id.key}, ${fingerprint}, ${payment}, 'running', now() + ${`${ttlMs} milliseconds`}::interval,
        ${claim}, ${owner.instanceId}, now() + ${`${owner.leaseMs} milliseconds`}::interval)
      on conflict (scope, key) do update set
        fingerprint = excluded.fingerprint, payment = excluded.payment, state = 'running', status = null, content_type = null,
        headers = null, body = null, created_at = now(), finished_at = null, expires_at = excluded.expires_at,
        claim = excluded.claim, owner = excluded.owner, lease_expires_at = excluded.lease_expires_at
      where idempotency_records.expires_at <= now()
      returning true as claimed`;
    const claimed = await runPrepared(db, claiming.compile(db));
    if (claimed.rows.length > 0) return { kind: 'claimed', ref: { ...id, claim } };
    const existing = await sql<RecordRow>`
      select fingerprint, payment, state, status, content_type, headers, body, claim,
        coalesce(lease_expires_at <= now(), false) as lapsed
      from idempotency_records
      where scope = ${id.scope} and key = ${id.key} and expires_at > now()`.execute(db);
    const row = existing.rows[0];
    // Expired (or pruned) between the two statements: claim again.
    if (row === undefined) continue;
    if (row.fingerprint !== fingerprint) return { kind: 'other_request' };
    if (row.state === 'running' || row.status === null || row.body === null) {
      // Claimed before leases existed (no claim), or its owner still renews it: it runs.
      if (row.state !== 'running' || row.claim === null || !row.lapsed)
        return { kind: 'running', payment: row.payment };
      const lapsed = await resolveLapsed(db, id, row.claim, owner, payment);
      if (lapsed === undefined) continue;
      if (lapsed.kind === 'running') return { kind: 'running', payment: row.payment };
      if (lapsed.kind === 'claimed') return lapsed;
      return { kind: 'ended', ref: { ...id, claim: row.claim }, money: lapsed.money, payment: row.payment };
    }
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
export async function finishIdempotencyKey(db: Db, id: ClaimRef, answer: KeptAnswer): Promise<void> {
  const finish = db
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
    .where('claim', '=', id.claim)
    .where('state', '=', 'running');
  await runPrepared(db, finish.compile());
}

/** Frees a claimed key whose call moved nothing: a retry runs the call anew. */
export async function releaseIdempotencyKey(db: Db, id: ClaimRef): Promise<void> {
  await db
    .deleteFrom('idempotency_records')
    .where('scope', '=', id.scope)
    .where('key', '=', id.key)
    .where('claim', '=', id.claim)
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
