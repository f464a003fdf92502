/**
 * Strict reading of a target's 402 body (x402 version 1). The body as a whole must be version 1
 * with an `accepts` array; an entry that is malformed is skipped with a reason instead of failing
 * the whole body, so one bad entry does not hide a payable one. Whether an entry is payable by us
 * (network, asset, amount, addresses) is decided later, by the choice (choose.ts).
 */
import { X402_VERSION, type PaymentRequiredBody, type PaymentRequirements } from './types';
import { fail, ok, type Result } from '../result';

/** More entries than this are not read: no target needs them, and each costs a validation. */
export const MAX_ACCEPTS_ENTRIES = 32;
/** A 402 body given as text longer than this is refused before parsing. */
export const MAX_PAYMENT_REQUIRED_BODY_CHARS = 256 * 1024;
/** uint256 has at most 78 decimal digits. */
const MAX_UINT256 = (1n << 256n) - 1n;
const CANONICAL_DIGITS = /^(0|[1-9][0-9]{0,77})$/;

export type PaymentRequiredFailureReason =
  'invalid_json' | 'body_too_large' | 'not_an_object' | 'unsupported_x402_version' | 'missing_accepts';

export type SkipReason = 'not_an_object' | 'missing_field' | 'invalid_field' | 'invalid_amount' | 'too_many_entries';

export interface SkippedRequirement {
  index: number;
  reason: SkipReason;
  field?: string;
  details: string;
}

export interface ParsedPaymentRequired {
  body: PaymentRequiredBody;
  /** Entries of `accepts` that were not kept, by their index in the original array. */
  skipped: SkippedRequirement[];
}

/** Reads a 402 body given as JSON text or as an already parsed value; never throws. */
export function parsePaymentRequired(input: unknown): Result<ParsedPaymentRequired, PaymentRequiredFailureReason> {
  let value = input;
  if (typeof input === 'string') {
    if (input.length > MAX_PAYMENT_REQUIRED_BODY_CHARS)
      return fail('body_too_large', `402 body longer than ${MAX_PAYMENT_REQUIRED_BODY_CHARS} characters`);
    try {
      value = JSON.parse(input);
    } catch {
      return fail('invalid_json', '402 body is not JSON');
    }
  }
  if (!isPlainObject(value)) return fail('not_an_object', '402 body is not a JSON object');
  if (value.x402Version !== X402_VERSION) {
    // JSON.stringify answers undefined for a missing field, whatever its declared type.
    const given = JSON.stringify(value.x402Version) as string | undefined;
    return fail('unsupported_x402_version', `x402Version ${given ?? 'missing'}; only version 1 is supported`);
  }
  if (!Array.isArray(value.accepts)) return fail('missing_accepts', '402 body has no accepts array');

  const accepts: PaymentRequirements[] = [];
  const skipped: SkippedRequirement[] = [];
  value.accepts.forEach((entry: unknown, index: number) => {
    if (index >= MAX_ACCEPTS_ENTRIES) {
      skipped.push({
        index,
        reason: 'too_many_entries',
        details: `only the first ${MAX_ACCEPTS_ENTRIES} entries are read`,
      });
      return;
    }
    const parsed = parseRequirements(entry);
    if (parsed.ok) accepts.push(parsed.value);
    else skipped.push({ index, ...parsed.skip });
  });
  const body: PaymentRequiredBody = { x402Version: X402_VERSION, accepts };
  if (typeof value.error === 'string') body.error = value.error;
  return ok({ body, skipped });
}

type EntryResult = { ok: true; value: PaymentRequirements } | { ok: false; skip: Omit<SkippedRequirement, 'index'> };

/** Validates one `accepts` entry; keeps only the fields of x402 v1. */
export function parseRequirements(entry: unknown): EntryResult {
  if (!isPlainObject(entry))
    return { ok: false, skip: { reason: 'not_an_object', details: 'entry is not a JSON object' } };
  const skip = (reason: SkipReason, field: string, details: string): EntryResult => ({
    ok: false,
    skip: { reason, field, details },
  });

  for (const field of [
    'scheme',
    'network',
    'maxAmountRequired',
    'resource',
    'description',
    'mimeType',
    'payTo',
    'asset',
  ] as const) {
    if (entry[field] === undefined || entry[field] === null) return skip('missing_field', field, `${field} is missing`);
    if (typeof entry[field] !== 'string') return skip('invalid_field', field, `${field} is not a string`);
  }
  for (const field of ['scheme', 'network', 'payTo', 'asset'] as const) {
    if ((entry[field] as string).trim() === '') return skip('invalid_field', field, `${field} is empty`);
  }
  const amount = entry.maxAmountRequired as string;
  if (!CANONICAL_DIGITS.test(amount) || BigInt(amount) > MAX_UINT256) {
    return skip(
      'invalid_amount',
      'maxAmountRequired',
      `maxAmountRequired "${amount.slice(0, 100)}" is not an integer amount in atomic units`,
    );
  }
  if (entry.maxTimeoutSeconds === undefined || entry.maxTimeoutSeconds === null) {
    return skip('missing_field', 'maxTimeoutSeconds', 'maxTimeoutSeconds is missing');
  }
  if (!Number.isSafeInteger(entry.maxTimeoutSeconds) || (entry.maxTimeoutSeconds as number) <= 0) {
    return skip('invalid_field', 'maxTimeoutSeconds', 'maxTimeoutSeconds is not a positive whole number');
  }
  for (const field of ['extra', 'outputSchema'] as const) {
    const item = entry[field];
    if (item !== undefined && item !== null && !isPlainObject(item))
      return skip('invalid_field', field, `${field} is not an object`);
  }

  const requirements: PaymentRequirements = {
    scheme: entry.scheme as string,
    network: entry.network as string,
    maxAmountRequired: amount,
    resource: entry.resource as string,
    description: entry.description as string,
    mimeType: entry.mimeType as string,
    payTo: entry.payTo as string,
    maxTimeoutSeconds: entry.maxTimeoutSeconds as number,
    asset: entry.asset as string,
  };
  if (isPlainObject(entry.extra)) requirements.extra = entry.extra;
  if (isPlainObject(entry.outputSchema)) requirements.outputSchema = entry.outputSchema;
  return { ok: true, value: requirements };
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
