/**
 * Header rules shared by the request we build and the response we hand back.
 *
 * Content encoding: we ask targets for `accept-encoding: identity` and never decompress. A
 * target that compresses anyway has its bytes and its content-encoding passed through together,
 * so our client can still decode them, and the size bound applies to what travels.
 */

// Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** The x402 payment headers of a request, both versions: only our own payment is ever sent to a target. */
export const PAYMENT_REQUEST_HEADERS = ['x-payment', 'payment-signature'] as const;

/**
 * The x402 headers of a target's response, both versions (payments/x402/v2.ts
 * TARGET_X402_RESPONSE_HEADERS, listed again here: http/ imports nothing of x402). They describe
 * the target's dealings with us; our client pays us, not the target, so they never reach it.
 */
export const TARGET_X402_RESPONSE_HEADERS = ['payment-required', 'payment-response', 'x-payment-response'] as const;

// Request headers we set ourselves from the URL, the body and the payment; a caller's value is dropped.
const OWNED_REQUEST_HEADERS = new Set<string>([
  'host',
  'content-length',
  'expect',
  'accept-encoding',
  ...PAYMENT_REQUEST_HEADERS,
]);

// Response headers that our own server computes, that describe the target's endpoints, or that are
// the target's x402 dealings with us; none of them is our client's.
const NOT_FOR_CLIENT = new Set<string>(['content-length', 'alt-svc', ...TARGET_X402_RESPONSE_HEADERS]);

export type ResponseHeaders = Record<string, string | string[]>;

function isHopByHopHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return HOP_BY_HOP.has(lower) || lower.startsWith('proxy-');
}

/** Header names listed in a Connection header are hop-by-hop for that message. */
export function connectionTokens(value: string | string[] | undefined): Set<string> {
  const joined = Array.isArray(value) ? value.join(',') : (value ?? '');
  return new Set(
    joined
      .split(',')
      .map((token) => token.trim().toLowerCase())
      .filter(Boolean),
  );
}

export function isOwnedRequestHeader(name: string): boolean {
  return OWNED_REQUEST_HEADERS.has(name.toLowerCase()) || isHopByHopHeader(name);
}

/** Lower-cases names and drops hop-by-hop headers, including those the Connection header names. */
export function withoutHopByHop(headers: Record<string, string | string[] | undefined>): ResponseHeaders {
  const listed = connectionTokens(headers.connection ?? headers.Connection);
  const kept: ResponseHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (value === undefined || isHopByHopHeader(lower) || listed.has(lower)) continue;
    kept[lower] = value;
  }
  return kept;
}

/**
 * Whether a header of the target's response may be passed back to our client. Set-Cookie is
 * kept (a pass-through proxy; our API authenticates by x-api-key, not cookies); Content-Length
 * is recomputed by our server; Content-Encoding is kept because the bytes are never decoded; the
 * target's x402 headers (PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE) are dropped.
 */
export function isSafeResponseHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return !isHopByHopHeader(lower) && !NOT_FOR_CLIENT.has(lower);
}

export function safeResponseHeaders(headers: Record<string, string | string[] | undefined>): ResponseHeaders {
  const kept: ResponseHeaders = {};
  for (const [name, value] of Object.entries(withoutHopByHop(headers))) {
    if (isSafeResponseHeader(name)) kept[name] = value;
  }
  return kept;
}
