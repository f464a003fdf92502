/**
 * X-PAYMENT and X-PAYMENT-RESPONSE (version 1), PAYMENT-SIGNATURE (version 2): base64 of JSON.
 * Decoding reads untrusted input, so it checks every field it returns and answers a typed failure
 * instead of throwing.
 */
import { canonicalNetwork } from '../basics/networkTable';
import { isPlainObject } from './parse';
import { isExactPayload, type SchemeLookup, type SchemePayload } from './schemes';
import { X402_VERSION, type PaymentPayload, type SettlementResponse, type SignedPaymentPayload } from './types';
import { X402_VERSION_2, type PaymentRequirementsV2, type ResourceInfo } from './v2';
import { fail, ok, type Result } from '../basics/result';

/** A Solana transaction is at most 1232 bytes; an EVM payload is under 1 KiB. Anything far larger is not a payment. */
export const MAX_PAYMENT_HEADER_CHARS = 16 * 1024;
const BASE64 = /^[A-Za-z0-9+/_-]+={0,2}$/;
const DIGITS = /^(0|[1-9][0-9]{0,77})$/;

export type PaymentHeaderFailureReason =
  | 'invalid_header'
  | 'invalid_json'
  | 'unsupported_x402_version'
  | 'unsupported_scheme'
  | 'unknown_network'
  | 'invalid_payload';

export type PaymentResponseFailureReason = 'invalid_header' | 'invalid_json' | 'invalid_settlement_response';

function toBase64Json(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
}

export function encodePaymentHeader(payment: SignedPaymentPayload): string {
  return toBase64Json(payment);
}

export function encodePaymentResponseHeader(settlement: SettlementResponse): string {
  return toBase64Json(settlement);
}

function fromBase64Json(header: unknown): Result<unknown, 'invalid_header' | 'invalid_json'> {
  if (typeof header !== 'string') return fail('invalid_header', 'header is missing');
  const text = header.trim();
  if (text === '') return fail('invalid_header', 'header is empty');
  if (text.length > MAX_PAYMENT_HEADER_CHARS)
    return fail('invalid_header', `header longer than ${MAX_PAYMENT_HEADER_CHARS} characters`);
  if (!BASE64.test(text)) return fail('invalid_header', 'header is not base64');
  try {
    return ok(JSON.parse(Buffer.from(text, 'base64').toString('utf8')));
  } catch {
    return fail('invalid_json', 'header is not base64 of JSON');
  }
}

/** Decodes and checks an X-PAYMENT header (version 1, scheme exact, a known network, the payload of its chain type). */
export function decodePaymentHeader(
  header: unknown,
  schemes: SchemeLookup,
): Result<PaymentPayload, PaymentHeaderFailureReason> {
  const decoded = fromBase64Json(header);
  if (!decoded.ok) return decoded;
  const value = decoded.value;
  if (!isPlainObject(value)) return fail('invalid_payload', 'payment is not a JSON object');
  if (value.x402Version !== X402_VERSION) return fail('unsupported_x402_version', 'only x402Version 1 is supported');
  if (value.scheme !== 'exact') return fail('unsupported_scheme', 'only the exact scheme is supported');
  if (typeof value.network !== 'string') return fail('unknown_network', 'network is missing');
  const network = canonicalNetwork(value.network);
  if (network === undefined) return fail('unknown_network', `unknown network "${value.network.slice(0, 64)}"`);
  const scheme = schemes.scheme(network, value.scheme);
  if (scheme === undefined) return fail('unsupported_scheme', `no exact scheme is registered for ${network}`);
  const payload = scheme.checkPayload(value.payload);
  if (!payload.ok) return payload;
  if (!isExactPayload(payload.value, schemes)) return fail('invalid_payload', 'the payload is not an exact payment');
  return ok({ x402Version: X402_VERSION, scheme: 'exact', network: value.network, payload: payload.value });
}

/** A PAYMENT-SIGNATURE as decoded and checked: the entry it says it pays (to be matched against our offers) and the payload. */
export interface PaymentSignature {
  x402Version: typeof X402_VERSION_2;
  resource?: ResourceInfo;
  accepted: PaymentRequirementsV2;
  /** Of the scheme `accepted` names (exact, or upto where a family takes it), as that scheme checks it. */
  payload: SchemePayload;
  extensions?: Record<string, unknown>;
}

const MAX_FIELD_CHARS = 2048;

function isShortString(value: unknown): value is string {
  return typeof value === 'string' && value.length <= MAX_FIELD_CHARS;
}

/**
 * Decodes and checks a PAYMENT-SIGNATURE header (version 2): `accepted` a complete entry on a known
 * network (CAIP-2 or our name) in a scheme registered for it, the payload checked by that scheme
 * (exact: as X-PAYMENT's is).
 * Whether `accepted` is one of our offers is the caller's question.
 */
export function decodePaymentSignatureHeader(
  header: unknown,
  schemes: SchemeLookup,
): Result<PaymentSignature, PaymentHeaderFailureReason> {
  const decoded = fromBase64Json(header);
  if (!decoded.ok) return decoded;
  const value = decoded.value;
  if (!isPlainObject(value)) return fail('invalid_payload', 'payment is not a JSON object');
  if (value.x402Version !== X402_VERSION_2)
    return fail('unsupported_x402_version', 'PAYMENT-SIGNATURE must be x402Version 2');
  const { accepted } = value;
  if (!isPlainObject(accepted)) return fail('invalid_payload', 'accepted is not a JSON object');
  if (typeof accepted.scheme !== 'string') return fail('unsupported_scheme', 'accepted.scheme is missing');
  if (typeof accepted.network !== 'string') return fail('unknown_network', 'accepted.network is missing');
  const network = canonicalNetwork(accepted.network);
  if (network === undefined) return fail('unknown_network', `unknown network "${accepted.network.slice(0, 64)}"`);
  for (const field of ['asset', 'payTo'] as const) {
    if (!isShortString(accepted[field]) || accepted[field] === '')
      return fail('invalid_payload', `accepted.${field} is not a string`);
  }
  if (typeof accepted.amount !== 'string' || !DIGITS.test(accepted.amount))
    return fail('invalid_payload', 'accepted.amount is not a decimal integer string');
  const timeout = accepted.maxTimeoutSeconds;
  if (typeof timeout !== 'number' || !Number.isSafeInteger(timeout) || timeout <= 0)
    return fail('invalid_payload', 'accepted.maxTimeoutSeconds is not a positive integer');
  if (!isPlainObject(accepted.extra)) return fail('invalid_payload', 'accepted.extra is not a JSON object');
  if (value.resource !== undefined && (!isPlainObject(value.resource) || !isShortString(value.resource.url)))
    return fail('invalid_payload', 'resource is not {url, ...}');
  if (value.extensions !== undefined && value.extensions !== null && !isPlainObject(value.extensions))
    return fail('invalid_payload', 'extensions is not a JSON object');
  // The schemes registered for the network (exact, upto on EVM): anything else is refused by name.
  const scheme = schemes.scheme(network, accepted.scheme);
  if (scheme === undefined)
    return fail('unsupported_scheme', `no ${accepted.scheme.slice(0, 32)} scheme is registered for ${network}`);
  const payload = scheme.checkPayload(value.payload);
  if (!payload.ok) return payload;
  if (!scheme.recognizes(payload.value))
    return fail('invalid_payload', `the payload is not a ${scheme.scheme} payment`);
  const signature: PaymentSignature = {
    x402Version: X402_VERSION_2,
    accepted: accepted as PaymentRequirementsV2,
    payload: payload.value,
  };
  if (isPlainObject(value.resource)) signature.resource = value.resource as unknown as ResourceInfo;
  if (isPlainObject(value.extensions)) signature.extensions = value.extensions;
  return ok(signature);
}

/** Decodes an X-PAYMENT-RESPONSE header (a target's report of its settlement). */
export function decodePaymentResponseHeader(header: unknown): Result<SettlementResponse, PaymentResponseFailureReason> {
  const decoded = fromBase64Json(header);
  if (!decoded.ok) return decoded;
  const value = decoded.value;
  if (!isPlainObject(value)) return fail('invalid_settlement_response', 'settlement response is not a JSON object');
  if (typeof value.success !== 'boolean') return fail('invalid_settlement_response', 'success is not a boolean');
  if (typeof value.transaction !== 'string') return fail('invalid_settlement_response', 'transaction is not a string');
  if (typeof value.network !== 'string') return fail('invalid_settlement_response', 'network is not a string');
  for (const field of ['payer', 'errorReason'] as const) {
    if (value[field] !== undefined && value[field] !== null && typeof value[field] !== 'string') {
      return fail('invalid_settlement_response', `${field} is not a string`);
    }
  }
  const settlement: SettlementResponse = {
    success: value.success,
    transaction: value.transaction,
    network: value.network,
  };
  if (typeof value.payer === 'string') settlement.payer = value.payer;
  if (typeof value.errorReason === 'string') settlement.errorReason = value.errorReason;
  // A version 2 receipt may name what was settled (upto: the amount used); only as a hint, never a proof.
  if (typeof value.amount === 'string' && DIGITS.test(value.amount)) settlement.amount = value.amount;
  return ok(settlement);
}
