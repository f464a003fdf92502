/**
 * The 402 a batch-settlement seller last answered to a request, kept a short while with the
 * choice made of it: the next identical request (same method, URL, headers and body) of the same
 * caller is paid by a voucher at once, without asking the seller for its price again or reading
 * its 402 again, so a paid call reaches the seller once, not twice.
 *
 * Only a 402 that we chose to pay through a channel is kept: a voucher moves nothing until the
 * seller commits it, so a price or terms that changed meanwhile cost one refused voucher (not
 * charged, its base signed again by the next one). The caller then forgets the kept 402 and asks
 * the seller afresh. A 402 is kept at most KEPT_MS, and at most MOST of them, the oldest dropped
 * first. `purpose` names the caller whose choice is kept (/proxy and /relay choose under their
 * own ceilings); the choice depends on nothing else that changes while the process runs (the
 * networks we pay on, the configuration).
 */
import { createHash } from 'node:crypto';
import type { TargetRequest } from '../basics/http/index';
import type { TargetPaymentRequired } from '../x402/parse';
import type { PaymentChoice } from '../x402/choose';

const KEPT_MS = 30_000;
const MOST = 1_000;

export type QuotePurpose = 'proxy' | 'relay';

/** A seller's 402 as read, and the channel payment chosen of it. */
export interface KeptQuote {
  required: TargetPaymentRequired;
  choice: PaymentChoice;
}

const kept = new Map<string, KeptQuote & { until: number }>();

function keyOf(purpose: QuotePurpose, request: TargetRequest): string {
  const hash = createHash('sha256');
  hash.update(`${purpose}\n${request.method} ${request.url}\n`);
  for (const name of Object.keys(request.headers).sort()) hash.update(`${name}: ${request.headers[name]}\n`);
  if (request.body !== undefined) hash.update(request.body);
  return hash.digest('base64');
}

/** The seller's 402 to this very request, and the choice made of it, when still kept. */
export function keptSellerQuote(
  purpose: QuotePurpose,
  request: TargetRequest,
  nowMs = Date.now(),
): KeptQuote | undefined {
  const key = keyOf(purpose, request);
  const entry = kept.get(key);
  if (entry === undefined) return undefined;
  if (entry.until <= nowMs) {
    kept.delete(key);
    return undefined;
  }
  return entry;
}

/** Keeps the seller's 402 to this request with the channel payment chosen of it. */
export function keepSellerQuote(
  purpose: QuotePurpose,
  request: TargetRequest,
  quote: KeptQuote,
  nowMs = Date.now(),
): void {
  const key = keyOf(purpose, request);
  kept.delete(key);
  kept.set(key, { ...quote, until: nowMs + KEPT_MS });
  if (kept.size > MOST) {
    const oldest = kept.keys().next();
    if (!oldest.done) kept.delete(oldest.value);
  }
}

/** Forgets the seller's kept 402 to this request: its next call asks the seller again. */
export function forgetSellerQuote(purpose: QuotePurpose, request: TargetRequest): void {
  kept.delete(keyOf(purpose, request));
}
