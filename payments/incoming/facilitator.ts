/**
 * The x402 facilitator's POST /settle (FACILITATOR_URL), read strictly. Its answer sorts into what
 * it claims: settled (with a transaction), pending (`settlement_pending` with a transaction:
 * broadcast, still under way), broadcast but unconfirmed (a transaction, no success, another
 * reason), declined (a 4xx, or `success: false` without a transaction), or unknown (timeout, 3xx,
 * 5xx, unreadable). None of them but a settlement the chain shows means "not paid": a facilitator
 * may settle and then answer 4xx or `success: false`, so after /settle was sent the chain decides
 * every outcome (payments/incoming/settle.ts).
 *
 * The facilitator may speak x402 version 1 or 2 (or both): its GET /supported, read once and kept
 * for a while (facilitatorSupport), says per network which. A network it lists in version 2 (by
 * its CAIP-2 id) is settled with version 2 bodies, any other with version 1 bodies, as before.
 *
 * Every call carries the headers that authenticate us to the facilitator when it requires them
 * (FACILITATOR_HEADERS, or a CDP JWT made for that one method and path: facilitatorHeaders.ts).
 * A 401 or 403 is a refusal of those credentials, said so in the settlement's `status`.
 *
 * Both go over node:http with a keep-alive pool, not fetch (whose web streams, Headers and Request
 * objects cost several times the CPU per exchange; docs/decisions.md). Redirects are not followed:
 * a 3xx is an answer we cannot read. Nothing is ever sent twice: a /settle that may have arrived is
 * unknown, and the chain decides.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import type { FacilitatorAuth } from '../basics/facilitatorAuth';
import { keepAliveAgent, keepAliveExchange } from '../basics/http/keepAlive';
import { canonicalNetwork, caip2Of, type NetworkName } from '../basics/networkTable';
import { isPlainObject } from '../x402/parse';
import { X402_VERSION, type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { requirementsToV2, resourceOf, X402_VERSION_2, type PaymentPayloadV2, type X402Version } from '../x402/v2';
import { facilitatorHeaders } from './facilitatorHeaders';

/** The errorReason of a settlement the facilitator broadcast and still awaits (@x402/core, @x402/evm, @x402/svm). */
export const SETTLEMENT_PENDING_REASON = 'settlement_pending';

/** A /settle answer is a few hundred bytes; more is not a facilitator speaking. */
export const MAX_FACILITATOR_RESPONSE_BYTES = 64 * 1024;

export type FacilitatorSettlement =
  | { kind: 'settled'; transaction: string; payer?: string }
  /** `settlement_pending`: broadcast and still under way (neither failed nor settled): followed as a settlement. */
  | { kind: 'pending'; transaction: string }
  | { kind: 'unconfirmed'; transaction: string; errorReason: string }
  /**
   * A 4xx (its `status`), or `success` false without a transaction: it says it did not settle,
   * which the chain must confirm. A 401 or 403 refused our credentials.
   */
  | { kind: 'declined'; errorReason: string; status?: number }
  | { kind: 'unknown'; details: string };

const agents = { 'http:': keepAliveAgent('http:', 64), 'https:': keepAliveAgent('https:', 64) };

/**
 * One exchange with the facilitator: its status and body text (undefined past `maxBytes`), or an
 * error (no answer within `timeoutMs`, a connection that failed). Never sent twice.
 */
async function exchange(
  url: string,
  init: { method: 'GET' | 'POST'; body?: string; timeoutMs: number; maxBytes: number; auth?: FacilitatorAuth },
): Promise<{ status: number; text: string | undefined }> {
  const target = new URL(url);
  const { auth, ...request } = init;
  const headers: OutgoingHttpHeaders = {
    ...(await facilitatorHeaders(auth, init.method, target)),
    accept: 'application/json',
  };
  if (init.body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = Buffer.byteLength(init.body);
  }
  const outcome = await keepAliveExchange(target, {
    ...request,
    headers,
    agent: target.protocol === 'https:' ? agents['https:'] : agents['http:'],
  });
  switch (outcome.kind) {
    case 'answered':
      return { status: outcome.status, text: outcome.body.toString('utf8') };
    case 'too_large':
      return { status: outcome.status, text: undefined };
    case 'timed_out':
      throw new Error(`no answer within ${init.timeoutMs} ms`);
    case 'closed_while_idle':
    case 'failed':
      throw outcome.error;
  }
}

/**
 * The body of POST /settle: version 1 as the payment and requirements are; version 2 with both in
 * version 2 form (CAIP-2 network, `amount`, `accepted` equal to the requirements).
 */
export function settleRequestBody(
  payment: PaymentPayload,
  requirements: PaymentRequirements,
  version: X402Version,
): Record<string, unknown> {
  if (version === X402_VERSION)
    return { x402Version: X402_VERSION, paymentPayload: payment, paymentRequirements: requirements };
  const accepted = requirementsToV2(requirements);
  const paymentPayload: PaymentPayloadV2 = {
    x402Version: X402_VERSION_2,
    resource: resourceOf(requirements),
    accepted,
    payload: payment.payload as unknown as Record<string, unknown>,
  };
  return { x402Version: X402_VERSION_2, paymentPayload, paymentRequirements: accepted };
}

export async function settleWithFacilitator(
  facilitatorUrl: string,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
  options: { timeoutMs: number; version?: X402Version; auth?: FacilitatorAuth },
): Promise<FacilitatorSettlement> {
  let status: number;
  let text: string | undefined;
  try {
    ({ status, text } = await exchange(`${facilitatorUrl.replace(/\/+$/, '')}/settle`, {
      method: 'POST',
      body: JSON.stringify(settleRequestBody(payment, requirements, options.version ?? X402_VERSION)),
      timeoutMs: options.timeoutMs,
      maxBytes: MAX_FACILITATOR_RESPONSE_BYTES,
      auth: options.auth,
    }));
  } catch (error) {
    return {
      kind: 'unknown',
      details: `facilitator /settle: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
  if (text === undefined) return { kind: 'unknown', details: 'facilitator /settle answered more than we read' };
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const answer = isPlainObject(body) ? body : undefined;
  const transaction = typeof answer?.transaction === 'string' ? answer.transaction : '';
  const errorReason = typeof answer?.errorReason === 'string' ? answer.errorReason : undefined;

  if (status >= 500 || status < 200 || (status >= 300 && status < 400))
    return { kind: 'unknown', details: `facilitator /settle answered ${status}` };
  if (status >= 400) return { kind: 'declined', errorReason: errorReason ?? `facilitator_http_${status}`, status };
  if (!answer || typeof answer.success !== 'boolean')
    return { kind: 'unknown', details: 'facilitator /settle answer is not a settlement response' };
  if (answer.success) {
    if (transaction === '') return { kind: 'unknown', details: 'facilitator reports success without a transaction' };
    return { kind: 'settled', transaction, payer: typeof answer.payer === 'string' ? answer.payer : undefined };
  }
  if (transaction !== '' && errorReason === SETTLEMENT_PENDING_REASON) return { kind: 'pending', transaction };
  if (transaction !== '') return { kind: 'unconfirmed', transaction, errorReason: errorReason ?? 'unconfirmed' };
  return { kind: 'declined', errorReason: errorReason ?? 'settlement_refused' };
}

/** One entry of a facilitator's GET /supported `kinds`, as far as we read it. */
export interface FacilitatorKind {
  x402Version: X402Version;
  scheme: string;
  network: string;
  extra?: Record<string, unknown>;
}

/** What a facilitator's GET /supported lists; undefined where it could not be read. */
export interface FacilitatorSupport {
  kinds: FacilitatorKind[];
}

/** How long a /supported answer is used before it is asked again; a failed read is tried again sooner. */
export const SUPPORTED_TTL_MS = 5 * 60_000;
export const SUPPORTED_RETRY_MS = 10_000;
const MAX_CACHED_FACILITATORS = 16;
/** A facilitator lists a few kinds per network; more than this is not read. */
const MAX_KINDS = 256;

const supportCache = new Map<string, { expiresAt: number; support: Promise<FacilitatorSupport | undefined> }>();

type SupportedOptions = { timeoutMs: number; auth?: FacilitatorAuth };

async function readSupported(
  facilitatorUrl: string,
  options: SupportedOptions,
): Promise<FacilitatorSupport | undefined> {
  try {
    const { status, text } = await exchange(`${facilitatorUrl.replace(/\/+$/, '')}/supported`, {
      method: 'GET',
      timeoutMs: options.timeoutMs,
      maxBytes: MAX_FACILITATOR_RESPONSE_BYTES,
      auth: options.auth,
    });
    if (status < 200 || status >= 300 || text === undefined) return undefined;
    const body: unknown = JSON.parse(text);
    if (!isPlainObject(body) || !Array.isArray(body.kinds)) return undefined;
    const kinds: FacilitatorKind[] = [];
    for (const kind of body.kinds.slice(0, MAX_KINDS) as unknown[]) {
      if (!isPlainObject(kind) || typeof kind.scheme !== 'string' || typeof kind.network !== 'string') continue;
      if (kind.x402Version !== X402_VERSION && kind.x402Version !== X402_VERSION_2) continue;
      kinds.push({
        x402Version: kind.x402Version,
        scheme: kind.scheme,
        network: kind.network,
        ...(isPlainObject(kind.extra) ? { extra: kind.extra } : {}),
      });
    }
    return { kinds };
  } catch {
    return undefined;
  }
}

/**
 * The facilitator's GET /supported, read within the bound and kept SUPPORTED_TTL_MS (a failed read
 * SUPPORTED_RETRY_MS); concurrent callers share one request.
 */
export function facilitatorSupport(
  facilitatorUrl: string,
  options: SupportedOptions,
): Promise<FacilitatorSupport | undefined> {
  const key = facilitatorUrl.replace(/\/+$/, '');
  const cached = supportCache.get(key);
  if (cached && cached.expiresAt > performance.now()) return cached.support;
  const support = readSupported(key, options);
  const entry = { expiresAt: Number.POSITIVE_INFINITY, support };
  supportCache.delete(key);
  supportCache.set(key, entry);
  for (const oldest of supportCache.keys()) {
    if (supportCache.size <= MAX_CACHED_FACILITATORS) break;
    supportCache.delete(oldest);
  }
  void support.then((read) => {
    entry.expiresAt = performance.now() + (read ? SUPPORTED_TTL_MS : SUPPORTED_RETRY_MS);
  });
  return support;
}

/** The exact kind a facilitator lists for `network` in `version` (version 2 by CAIP-2 id or a `namespace:*` pattern). */
function kindFor(
  support: FacilitatorSupport | undefined,
  network: NetworkName,
  version: X402Version,
): FacilitatorKind | undefined {
  const caip2 = caip2Of(network);
  return support?.kinds.find((kind) => {
    if (kind.x402Version !== version || kind.scheme !== 'exact') return false;
    if (version === X402_VERSION) return canonicalNetwork(kind.network) === network;
    return kind.network === caip2 || (kind.network.endsWith(':*') && caip2.startsWith(kind.network.slice(0, -1)));
  });
}

/** The version to settle a payment on `network` with: 2 when the facilitator lists the network in version 2, else 1. */
export function facilitatorVersionFor(support: FacilitatorSupport | undefined, network: NetworkName): X402Version {
  return kindFor(support, network, X402_VERSION_2) ? X402_VERSION_2 : X402_VERSION;
}

/**
 * The fee payer a facilitator names for Solana payments on `network` (its GET /supported, in the
 * version we would settle with), which our 402 must give clients when the facilitator settles.
 * Undefined when it names none or cannot be read within the bound.
 */
export async function facilitatorFeePayer(
  facilitatorUrl: string,
  network: NetworkName,
  options: SupportedOptions,
): Promise<string | undefined> {
  const support = await facilitatorSupport(facilitatorUrl, options);
  const kind = kindFor(support, network, facilitatorVersionFor(support, network));
  const feePayer = kind?.extra?.feePayer;
  return typeof feePayer === 'string' && feePayer !== '' ? feePayer : undefined;
}

/** What the facilitator's GET /supported says of our access to it. */
export type FacilitatorAccess =
  | { kind: 'granted' }
  /** 401 or 403: our credentials are missing, wrong, expired or revoked. */
  | { kind: 'refused'; status: number }
  /** No answer, or another status: says nothing of our credentials. */
  | { kind: 'unknown'; details: string };

/** One GET /supported with our credentials (never cached), read for its status only. */
export async function facilitatorAccess(facilitatorUrl: string, options: SupportedOptions): Promise<FacilitatorAccess> {
  try {
    const { status } = await exchange(`${facilitatorUrl.replace(/\/+$/, '')}/supported`, {
      method: 'GET',
      timeoutMs: options.timeoutMs,
      maxBytes: MAX_FACILITATOR_RESPONSE_BYTES,
      auth: options.auth,
    });
    if (status === 401 || status === 403) return { kind: 'refused', status };
    if (status >= 200 && status < 300) return { kind: 'granted' };
    return { kind: 'unknown', details: `GET /supported answered ${status}` };
  } catch (error) {
    return { kind: 'unknown', details: `GET /supported: ${error instanceof Error ? error.message : String(error)}` };
  }
}

/**
 * What to tell the operator when the facilitator refuses our credentials: the variables to check,
 * never their values.
 */
export function facilitatorRefusalAdvice(auth: FacilitatorAuth | undefined, status: number): string {
  if (!auth)
    return `the facilitator (FACILITATOR_URL) refused us with ${status}: it requires authentication; set CDP_API_KEY_ID and CDP_API_KEY_SECRET (Coinbase) or FACILITATOR_HEADERS`;
  return `the facilitator (FACILITATOR_URL) refused our credentials with ${status}: check ${auth.variables.join(', ')}`;
}
