/**
 * Strict reading of a target's 402, in either version: the PAYMENT-REQUIRED header (x402 version
 * 2, base64 JSON) first, then a version 1 body. The whole must be of its version with an `accepts`
 * array; an entry that is malformed is skipped with a reason instead of failing the whole, so one
 * bad entry does not hide a payable one. Whether an entry is payable by us (network, asset, amount,
 * addresses) is decided later, by the choice (choose.ts).
 *
 * A version 2 entry is converted to our version 1 shape for choosing (its network by our version 1
 * name when we know it) and kept verbatim beside it, since our payment must echo it exactly.
 */
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { canonicalNetwork } from '../basics/networkTable';
import { X402_VERSION, type PaymentRequiredBody, type PaymentRequirements } from './types';
import { requirementsFromV2, X402_VERSION_2, type PaymentRequirementsV2, type ResourceInfo } from './v2';
import { fail, ok, type Result } from '../basics/result';

/** More entries than this are not read: no target needs them, and each costs a validation. */
export const MAX_ACCEPTS_ENTRIES = 32;
/** A 402 body given as text longer than this is refused before parsing. */
export const MAX_PAYMENT_REQUIRED_BODY_CHARS = 256 * 1024;
/** uint256 has at most 78 decimal digits. */
const MAX_UINT256 = (1n << 256n) - 1n;
const CANONICAL_DIGITS = /^(0|[1-9][0-9]{0,77})$/;

/** A PAYMENT-REQUIRED header longer than this is refused before decoding. */
export const MAX_PAYMENT_REQUIRED_HEADER_CHARS = 64 * 1024;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

export type PaymentRequiredFailureReason =
  | 'invalid_json'
  | 'body_too_large'
  | 'not_an_object'
  | 'unsupported_x402_version'
  | 'missing_accepts'
  | 'invalid_header'
  | 'invalid_resource';

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
function parsePaymentRequired(input: unknown): Result<ParsedPaymentRequired, PaymentRequiredFailureReason> {
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
  readEntries(value.accepts, parseRequirements, skipped, (requirements) => accepts.push(requirements));
  const body: PaymentRequiredBody = { x402Version: X402_VERSION, accepts };
  if (typeof value.error === 'string') body.error = value.error;
  return ok({ body, skipped });
}

type EntryFailure = { ok: false; skip: Omit<SkippedRequirement, 'index'> };
type EntryResult = { ok: true; value: PaymentRequirements } | EntryFailure;

/**
 * Reads the first MAX_ACCEPTS_ENTRIES entries of `accepts` with `parse`, in order: each kept one is
 * given to `keep` with the entry it was read from; those beyond, and those `parse` skips, go to `skipped`.
 */
function readEntries(
  entries: unknown[],
  parse: (entry: unknown) => EntryResult,
  skipped: SkippedRequirement[],
  keep: (requirements: PaymentRequirements, entry: unknown) => void,
): void {
  entries.forEach((entry, index) => {
    if (index >= MAX_ACCEPTS_ENTRIES) {
      skipped.push({
        index,
        reason: 'too_many_entries',
        details: `only the first ${MAX_ACCEPTS_ENTRIES} entries are read`,
      });
      return;
    }
    const parsed = parse(entry);
    if (parsed.ok) keep(parsed.value, entry);
    else skipped.push({ index, ...parsed.skip });
  });
}

function skip(reason: SkipReason, field: string, details: string): EntryFailure {
  return { ok: false, skip: { reason, field, details } };
}

function notAnObject(): EntryFailure {
  return { ok: false, skip: { reason: 'not_an_object', details: 'entry is not a JSON object' } };
}

/**
 * The checks both versions make of an entry's amount (named `field`: an integer in atomic units
 * that fits uint256) and of its maxTimeoutSeconds (a positive whole number); undefined when both hold.
 */
function checkAmountAndTimeout(
  entry: Record<string, unknown>,
  field: 'maxAmountRequired' | 'amount',
): EntryFailure | undefined {
  const amount = entry[field] as string;
  if (!CANONICAL_DIGITS.test(amount) || BigInt(amount) > MAX_UINT256) {
    return skip('invalid_amount', field, `${field} "${amount.slice(0, 100)}" is not an integer amount in atomic units`);
  }
  if (entry.maxTimeoutSeconds === undefined || entry.maxTimeoutSeconds === null) {
    return skip('missing_field', 'maxTimeoutSeconds', 'maxTimeoutSeconds is missing');
  }
  if (!Number.isSafeInteger(entry.maxTimeoutSeconds) || (entry.maxTimeoutSeconds as number) <= 0) {
    return skip('invalid_field', 'maxTimeoutSeconds', 'maxTimeoutSeconds is not a positive whole number');
  }
  return undefined;
}

/** Validates one `accepts` entry; keeps only the fields of x402 v1. */
function parseRequirements(entry: unknown): EntryResult {
  if (!isPlainObject(entry)) return notAnObject();
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
  const invalid = checkAmountAndTimeout(entry, 'maxAmountRequired');
  if (invalid) return invalid;
  for (const field of ['extra', 'outputSchema'] as const) {
    const item = entry[field];
    if (item !== undefined && item !== null && !isPlainObject(item))
      return skip('invalid_field', field, `${field} is not an object`);
  }

  const requirements: PaymentRequirements = {
    scheme: entry.scheme as string,
    network: entry.network as string,
    maxAmountRequired: entry.maxAmountRequired as string,
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

/** A version 2 offer as the target sent it, with what our payment echoes beside `payload`. */
export interface OfferV2 {
  /** The entry of `accepts`, verbatim (every field, as decoded): our `accepted`. */
  accepted: PaymentRequirementsV2;
  /** The 402's `resource`, verbatim. */
  resource: ResourceInfo;
  /** The 402's `extensions`, verbatim when it is an object (the reference client echoes them). */
  extensions?: Record<string, unknown>;
}

/**
 * A target's 402 read in the version it spoke. `accepts` is in our version 1 shape in both; for
 * version 2, `offers[i]` is the verbatim entry `accepts[i]` was read from.
 */
export type TargetPaymentRequired =
  | { x402Version: 1; error?: string; accepts: PaymentRequirements[]; skipped: SkippedRequirement[] }
  | {
      x402Version: 2;
      error?: string;
      accepts: PaymentRequirements[];
      offers: OfferV2[];
      skipped: SkippedRequirement[];
      /** The 402's `extensions`, verbatim when it is an object (each offer carries them too, to echo). */
      extensions?: Record<string, unknown>;
    };

/**
 * A target's 402 in either version: a PAYMENT-REQUIRED header that reads as version 2 wins, else a
 * version 1 body; undefined when neither is x402 (an ordinary 402 of the target). Never throws.
 */
export function readTargetPaymentRequired(
  header: string | string[] | undefined,
  body: unknown,
): TargetPaymentRequired | undefined {
  if (header !== undefined) {
    const v2 = parsePaymentRequiredHeader(Array.isArray(header) ? header[0] : header);
    if (v2.ok) return v2.value;
  }
  const v1 = parsePaymentRequired(body);
  if (!v1.ok) return undefined;
  const { error, accepts } = v1.value.body;
  return { x402Version: X402_VERSION, ...(error === undefined ? {} : { error }), accepts, skipped: v1.value.skipped };
}

/** Reads a PAYMENT-REQUIRED header (x402 version 2): bounded, base64 of JSON, every field checked. */
function parsePaymentRequiredHeader(
  header: unknown,
): Result<Extract<TargetPaymentRequired, { x402Version: 2 }>, PaymentRequiredFailureReason> {
  if (typeof header !== 'string' || header.trim() === '') return fail('invalid_header', 'PAYMENT-REQUIRED is missing');
  const text = header.trim();
  if (text.length > MAX_PAYMENT_REQUIRED_HEADER_CHARS)
    return fail('body_too_large', `PAYMENT-REQUIRED longer than ${MAX_PAYMENT_REQUIRED_HEADER_CHARS} characters`);
  if (!BASE64.test(text)) return fail('invalid_header', 'PAYMENT-REQUIRED is not base64');
  let value: unknown;
  try {
    // The package decodes (base64, UTF-8, JSON) and checks nothing: every field is checked below.
    value = decodePaymentRequiredHeader(text);
  } catch {
    return fail('invalid_json', 'PAYMENT-REQUIRED is not base64 of JSON');
  }
  if (!isPlainObject(value)) return fail('not_an_object', 'PAYMENT-REQUIRED is not a JSON object');
  if (value.x402Version !== X402_VERSION_2) {
    const given = JSON.stringify(value.x402Version) as string | undefined;
    return fail('unsupported_x402_version', `PAYMENT-REQUIRED x402Version ${given ?? 'missing'}; expected 2`);
  }
  const resource = checkResource(value.resource);
  if (!resource.ok) return resource;
  if (!Array.isArray(value.accepts)) return fail('missing_accepts', 'PAYMENT-REQUIRED has no accepts array');

  const accepts: PaymentRequirements[] = [];
  const offers: OfferV2[] = [];
  const skipped: SkippedRequirement[] = [];
  const extensions = isPlainObject(value.extensions) ? value.extensions : undefined;
  readEntries(
    value.accepts,
    (entry) => parseRequirementsV2(entry, resource.value),
    skipped,
    (requirements, entry) => {
      accepts.push(requirements);
      offers.push({
        accepted: entry as PaymentRequirementsV2,
        resource: value.resource as ResourceInfo,
        ...(extensions ? { extensions } : {}),
      });
    },
  );
  return ok({
    x402Version: X402_VERSION_2,
    ...(typeof value.error === 'string' ? { error: value.error } : {}),
    accepts,
    offers,
    skipped,
    ...(extensions ? { extensions } : {}),
  });
}

function checkResource(resource: unknown): Result<ResourceInfo, 'invalid_resource'> {
  if (!isPlainObject(resource)) return fail('invalid_resource', 'resource is not an object');
  if (typeof resource.url !== 'string') return fail('invalid_resource', 'resource.url is not a string');
  for (const field of ['description', 'mimeType'] as const) {
    const item = resource[field];
    if (item !== undefined && item !== null && typeof item !== 'string')
      return fail('invalid_resource', `resource.${field} is not a string`);
  }
  return ok({
    url: resource.url,
    ...(typeof resource.description === 'string' ? { description: resource.description } : {}),
    ...(typeof resource.mimeType === 'string' ? { mimeType: resource.mimeType } : {}),
  });
}

/**
 * Validates one version 2 `accepts` entry (`amount`, CAIP-2 network, no resource fields) and
 * answers it in our version 1 shape; the network is named as version 1 names it when we know it.
 */
function parseRequirementsV2(entry: unknown, resource: ResourceInfo): EntryResult {
  if (!isPlainObject(entry)) return notAnObject();
  for (const field of ['scheme', 'network', 'amount', 'payTo', 'asset'] as const) {
    if (entry[field] === undefined || entry[field] === null) return skip('missing_field', field, `${field} is missing`);
    if (typeof entry[field] !== 'string') return skip('invalid_field', field, `${field} is not a string`);
    if (entry[field].trim() === '') return skip('invalid_field', field, `${field} is empty`);
  }
  const invalid = checkAmountAndTimeout(entry, 'amount');
  if (invalid) return invalid;
  if (entry.extra !== undefined && entry.extra !== null && !isPlainObject(entry.extra))
    return skip('invalid_field', 'extra', 'extra is not an object');

  const requirements = requirementsFromV2(
    {
      scheme: entry.scheme as string,
      network: entry.network as PaymentRequirementsV2['network'],
      amount: entry.amount as string,
      asset: entry.asset as string,
      payTo: entry.payTo as string,
      maxTimeoutSeconds: entry.maxTimeoutSeconds as number,
      extra: isPlainObject(entry.extra) ? entry.extra : {},
    },
    resource,
  );
  return {
    ok: true,
    value: { ...requirements, network: canonicalNetwork(requirements.network) ?? requirements.network },
  };
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
