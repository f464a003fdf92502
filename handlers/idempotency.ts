/**
 * The HTTP side of retries after a lost answer (payments/basics/idempotency.ts): a paid call of /proxy or
 * /relay run at most once per (scope, key), its answer kept as the bytes the client was sent and
 * replayed to every repeat of the same request, with Idempotent-Replayed: true.
 */
import type { Db } from '../db/index';
import type { Deps } from './deps';
import {
  claimIdempotencyKey,
  finishIdempotencyKey,
  MAX_KEPT_BODY_BYTES,
  releaseIdempotencyKey,
  RUNNING_RETRY_AFTER_SECONDS,
  type ClaimOwner,
  type ClaimRef,
  type EndedMoney,
  type IdempotencyScope,
  type KeptAnswer,
} from '../payments/basics/idempotency';
import { errorBody, internalErrorBody } from './errors';
import type { OperationId, RawReply, Reply } from './types';

export const REPLAYED_HEADER = 'Idempotent-Replayed';

/** What a run produced, and whether it is kept: an answer that moved nothing frees the key instead. */
export interface RunAnswer<K extends OperationId> {
  reply: Reply<K>;
  keep: boolean;
}

const JSON_TYPE = 'application/json; charset=utf-8';

/** Any operation's reply, as server/app.ts sends it. */
type SentReply = RawReply | { status: number; body: unknown; headers?: Record<string, string> };

/** The bytes of a reply as server/app.ts sends them (express's res.json is JSON.stringify with this type). */
function keptAnswerOf(reply: SentReply): KeptAnswer {
  const headers = reply.headers ?? {};
  if ('raw' in reply) {
    const body = typeof reply.raw === 'string' ? Buffer.from(reply.raw, 'utf8') : reply.raw;
    return { status: reply.status, contentType: reply.contentType, headers, body };
  }
  return { status: reply.status, contentType: JSON_TYPE, headers, body: Buffer.from(JSON.stringify(reply.body)) };
}

/** A kept answer as it was sent, marked as a replay. */
function replayOf(answer: KeptAnswer): RawReply {
  return {
    status: answer.status,
    raw: answer.body,
    contentType: answer.contentType,
    headers: { ...answer.headers, [REPLAYED_HEADER]: 'true' },
  };
}

/** The 409 of a repeat while the first call runs. */
export function inProgressReply(details: string) {
  return {
    status: 409 as const,
    body: errorBody('idempotency_in_progress', details),
    headers: { 'Retry-After': String(RUNNING_RETRY_AFTER_SECONDS) },
  };
}

/** The 422 of a key first used with another request. */
export function keyReusedReply(details: string) {
  return { status: 422 as const, body: errorBody('idempotency_key_reused', details) };
}

/** A kept answer too large to keep whole: the call ran once; its repeats learn its status only. */
function tooLarge(answer: KeptAnswer, requestId: string): KeptAnswer {
  const body = errorBody(
    'internal_error',
    `The first call with this key answered ${answer.status} with a body of ${answer.body.length} bytes, more than can be kept for a repeat; it is not run again (request id ${requestId}).`,
  );
  return { status: 500, contentType: JSON_TYPE, headers: {}, body: Buffer.from(JSON.stringify(body)) };
}

export interface Once<K extends OperationId> {
  db: Db;
  log: Deps['log'];
  /** This instance, which renews the leases of the calls it runs. */
  owner: ClaimOwner;
  id: IdempotencyScope;
  fingerprint: string;
  operationId: K;
  requestId: string;
  /** Runs the call; the money it records carries `claim`. */
  run: (claim: ClaimRef) => Promise<RunAnswer<K>>;
  /** The answer to a repeat while the first call runs. */
  running: () => Reply<K>;
  /** The answer to a repeat of a call whose process died, from the money it left, once that has ended (kept). */
  ended: (money: EndedMoney) => Reply<K>;
  /** The answer when the key was first used with another request. */
  otherRequest: () => Promise<Reply<K>>;
  /**
   * /relay with an Idempotency-Key, where the key's scope (the payer) is read from a payment not
   * yet verified: the request's payment, and the check a repeat carrying another payment than the
   * first call's must pass (it would pay: signature, amount, funds) before it learns anything.
   * The check answers the refusal, or undefined; the payment is never recorded or settled.
   */
  proof?: { payment: string; check: () => Promise<Reply<K> | undefined> };
}

/**
 * Runs the call once per key: a repeat of a finished call gets its kept answer, a repeat while it
 * runs `running`, another request under the key `otherRequest`. A call that threw keeps the 500
 * the client was given (money may have moved: it is never run again under this key).
 */
export async function runOnce<K extends OperationId>(once: Once<K>): Promise<Reply<K>> {
  const { proof } = once;
  const claim = await claimIdempotencyKey(once.db, once.id, once.fingerprint, {
    owner: once.owner,
    ...(proof ? { payment: proof.payment } : {}),
  });
  if (proof && claim.kind !== 'claimed' && (claim.kind === 'other_request' || claim.payment !== proof.payment)) {
    const refusal = await proof.check();
    if (refusal !== undefined) return refusal;
  }
  switch (claim.kind) {
    case 'finished':
      return replayOf(claim.answer);
    case 'running':
      return once.running();
    case 'other_request':
      return once.otherRequest();
    case 'ended': {
      // The first call's process died; the jobs ended its money. This answer is kept as its own.
      const kept = keptAnswerOf(once.ended(claim.money));
      await keepTrying(once, () => finishIdempotencyKey(once.db, claim.ref, kept));
      return replayOf(kept);
    }
    case 'claimed':
      break;
  }
  const ref = claim.ref;
  let answer: RunAnswer<K>;
  try {
    answer = await once.run(ref);
  } catch (error) {
    const body = internalErrorBody(once.operationId, once.requestId);
    await keepTrying(once, () =>
      finishIdempotencyKey(once.db, ref, {
        status: 500,
        contentType: JSON_TYPE,
        headers: {},
        body: Buffer.from(JSON.stringify(body)),
      }),
    );
    throw error;
  }
  if (!answer.keep) {
    await keepTrying(once, () => releaseIdempotencyKey(once.db, ref));
    return answer.reply;
  }
  const kept = keptAnswerOf(answer.reply);
  await keepTrying(once, () =>
    finishIdempotencyKey(once.db, ref, kept.body.length > MAX_KEPT_BODY_BYTES ? tooLarge(kept, once.requestId) : kept),
  );
  return answer.reply;
}

/** Waits between the tries of a write that keeps an answer (a database restart replaces the connection meanwhile). */
const KEEP_RETRY_MS = [250, 1_000];

/**
 * Writes what the call left for its repeats, trying again while the database is briefly away. The
 * call has run and its money has moved: its answer goes to the client even when the write never
 * succeeds (the record then stays running, and repeats are told so until it expires).
 */
async function keepTrying(once: Pick<Once<OperationId>, 'log' | 'id'>, write: () => Promise<unknown>): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    try {
      await write();
      return;
    } catch (error) {
      const wait = KEEP_RETRY_MS[attempt];
      if (wait === undefined) {
        once.log.error(
          { err: error, idempotencyScope: once.id.scope },
          'the answer of a call could not be kept for its repeats; they are told it still runs until the record expires',
        );
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

/** The path and the query that shapes the answer, for the request's fingerprint. */
export function pathWithFormat(path: string, format: unknown): string {
  return typeof format === 'string' ? `${path}?format=${encodeURIComponent(format)}` : path;
}
