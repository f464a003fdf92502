/**
 * The 402 a batch-settlement seller last answered to a request, kept a short while: the next
 * identical request (same method, URL, headers and body) is paid by a voucher at once instead of
 * asking the seller for its price again, so a paid call reaches the seller once, not twice.
 *
 * Only a 402 that we chose to pay through a channel is kept: a voucher moves nothing until the
 * seller commits it, so a price or terms that changed meanwhile cost one refused voucher (not
 * charged, its base signed again by the next one). The caller then forgets the kept 402 and asks
 * the seller afresh. A 402 is kept at most KEPT_MS, and at most MOST of them, the oldest dropped
 * first.
 */
import { createHash } from 'node:crypto';
import type { TargetRequest, TargetResponse } from '../basics/http/index';

const KEPT_MS = 30_000;
const MOST = 1_000;

const kept = new Map<string, { response: TargetResponse; until: number }>();

function keyOf(request: TargetRequest): string {
  const hash = createHash('sha256');
  hash.update(`${request.method} ${request.url}\n`);
  for (const name of Object.keys(request.headers).sort()) hash.update(`${name}: ${request.headers[name]}\n`);
  if (request.body !== undefined) hash.update(request.body);
  return hash.digest('base64');
}

/** The seller's 402 to this very request when it is still kept. */
export function keptSellerQuote(request: TargetRequest, nowMs = Date.now()): TargetResponse | undefined {
  const key = keyOf(request);
  const entry = kept.get(key);
  if (entry === undefined) return undefined;
  if (entry.until <= nowMs) {
    kept.delete(key);
    return undefined;
  }
  return entry.response;
}

/** Keeps the seller's 402 to this request (one we pay through a channel). */
export function keepSellerQuote(request: TargetRequest, response: TargetResponse, nowMs = Date.now()): void {
  if (response.status !== 402) return;
  const key = keyOf(request);
  kept.delete(key);
  kept.set(key, { response, until: nowMs + KEPT_MS });
  if (kept.size > MOST) {
    const oldest = kept.keys().next();
    if (!oldest.done) kept.delete(oldest.value);
  }
}

/** Forgets the seller's kept 402 to this request: its next call asks the seller again. */
export function forgetSellerQuote(request: TargetRequest): void {
  kept.delete(keyOf(request));
}
