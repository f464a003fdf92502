/**
 * What /proxy and /relay share when they answer with a target's response: the bound on the call,
 * and the target's status, bytes and content type passed through with its safe headers, never
 * letting the target set a header that is ours, or wrapped in JSON when the client asks format=json.
 */
import type { RawReply } from './types';
import { errorReply } from './errors';
import { microToUsdc } from '../payments/basics/money';
import { safeResponseHeaders, type TargetResponse } from '../payments/basics/http/index';
import { bodyValue } from '../payments/outgoing/index';

/** X-TIMEOUT's ceiling (milliseconds), as the document declares it. */
export const MAX_CLIENT_TIMEOUT_MS = 120_000;

/**
 * The bound on the whole call: the smallest of the body's `timeout` (seconds), X-TIMEOUT
 * (milliseconds) and MAX_CLIENT_TIMEOUT_MS when the client gives either, else TARGET_TIMEOUT_MS.
 * A body timeout above the maximum is capped rather than refused: clients send their own client
 * timeout there (HTTPayer's SDK: 600 s), and asking for longer risks nothing.
 */
export function callTimeoutMs(
  bodySeconds: number | null | undefined,
  header: string | string[] | undefined,
  defaultMs: number,
): number {
  const given: number[] = [];
  if (typeof bodySeconds === 'number' && bodySeconds > 0) given.push(Math.ceil(bodySeconds * 1000));
  const headerMs = Number(Array.isArray(header) ? header[0] : header);
  if (Number.isFinite(headerMs) && headerMs > 0) given.push(headerMs);
  if (given.length === 0) return defaultMs;
  return Math.min(...given, MAX_CLIENT_TIMEOUT_MS);
}

/** Headers of ours that a target must not set on our response. */
const OWN_HEADERS = new Set([
  'x-request-id',
  'x-service-status',
  'x-service-webhook',
  'x-client-payment',
  'x-refund-webhook-id',
  'content-type',
]);

/** The target's response as it came, with `ours` added (a target header of the same name is dropped). */
function passThroughReply(response: TargetResponse, ours: Record<string, string> = {}): RawReply {
  const replaced = new Set(Object.keys(ours).map((name) => name.toLowerCase()));
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(safeResponseHeaders(response.headers))) {
    if (!OWN_HEADERS.has(name) && !replaced.has(name)) headers[name] = value;
  }
  Object.assign(headers, ours);
  const contentType = response.headers['content-type'];
  return {
    status: response.status,
    raw: response.body,
    contentType: typeof contentType === 'string' && contentType !== '' ? contentType : 'application/octet-stream',
    headers,
  };
}

/**
 * The target's answer for a client that asked `format=json` (/proxy and /relay alike, so that one
 * client reads both the same way): {success, result} with the target's status, plus `status` when
 * it did not answer 2xx. Only our own headers go with it: the target's describe a body we replaced.
 */
function jsonWrappedReply(response: TargetResponse, ours: Record<string, string> = {}): RawReply {
  const success = response.status >= 200 && response.status < 300;
  const body = { success, result: bodyValue(response), ...(success ? {} : { status: response.status }) };
  return {
    status: response.status,
    raw: JSON.stringify(body),
    contentType: 'application/json; charset=utf-8',
    headers: ours,
  };
}

/** The target's answer as the client asked for it: wrapped with `format=json`, else as it came. */
export function targetReply(response: TargetResponse, format: unknown, ours: Record<string, string> = {}): RawReply {
  return format === 'json' ? jsonWrappedReply(response, ours) : passThroughReply(response, ours);
}

/** A daily volume limit that would be exceeded (/proxy and /relay): 429 with the figures, in USD. */
export function spendLimitReply(
  error: string,
  refusal: { details: string; spentMicroUsdc: bigint; limitMicroUsdc: bigint; requestedMicroUsdc: bigint },
) {
  return errorReply('spend_limit_exceeded', refusal.details, {
    error,
    currentSpend: microToUsdc(refusal.spentMicroUsdc),
    limit: microToUsdc(refusal.limitMicroUsdc),
    requestedAmount: microToUsdc(refusal.requestedMicroUsdc),
  });
}
