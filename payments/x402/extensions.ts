/**
 * The x402 version 2 extensions we speak (`extensions` of PAYMENT-REQUIRED, echoed in a payment's
 * PAYMENT-SIGNATURE; the wire shapes of @x402/extensions 2.27, held equal to the package by a
 * test): `payment-identifier` (a payer's idempotency key for one payment) and `bazaar` (a
 * resource's discovery metadata). Any other extension is ignored where we read and echoed as it
 * came where we echo.
 */
import { createHash } from 'node:crypto';
import { isPlainObject, type TargetPaymentRequired } from './parse';
import { fail, ok, type Result } from '../basics/result';

export const PAYMENT_IDENTIFIER = 'payment-identifier';
export const BAZAAR = 'bazaar';

/** A payment id: 16 to 128 characters of letters, digits, `_` and `-` (the extension's own rule). */
export const PAYMENT_ID_MIN_LENGTH = 16;
export const PAYMENT_ID_MAX_LENGTH = 128;
export const PAYMENT_ID_PATTERN = /^[a-zA-Z0-9_-]+$/;

/** The JSON schema of the extension's `info`, as @x402/extensions declares it. */
const PAYMENT_IDENTIFIER_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: {
    required: { type: 'boolean' },
    id: {
      type: 'string',
      minLength: PAYMENT_ID_MIN_LENGTH,
      maxLength: PAYMENT_ID_MAX_LENGTH,
      pattern: '^[a-zA-Z0-9_-]+$',
    },
  },
  required: ['required'],
} as const;

/**
 * The declaration of our PAYMENT-REQUIRED where a payment id is honoured (/relay, /llm/chat): an
 * id is optional. A fresh object each time: a client's hook writes its id into the one it read.
 */
export function paymentIdentifierDeclaration(): { info: { required: boolean }; schema: unknown } {
  return { info: { required: false }, schema: structuredClone(PAYMENT_IDENTIFIER_SCHEMA) };
}

function isValidPaymentId(id: unknown): id is string {
  return (
    typeof id === 'string' &&
    id.length >= PAYMENT_ID_MIN_LENGTH &&
    id.length <= PAYMENT_ID_MAX_LENGTH &&
    PAYMENT_ID_PATTERN.test(id)
  );
}

/**
 * The id a payment's `extensions` carry: undefined when there is none (no extensions, no
 * payment-identifier, or the declaration echoed without an `id`); refused when `info.id` is given
 * and is not a valid id, or the extension is not `{info: {...}}`.
 */
export function paymentIdentifierOf(
  extensions: Record<string, unknown> | undefined,
): Result<string | undefined, 'invalid_payment_identifier'> {
  const extension = extensions?.[PAYMENT_IDENTIFIER];
  if (extension === undefined || extension === null) return ok(undefined);
  if (!isPlainObject(extension) || !isPlainObject(extension.info))
    return fail('invalid_payment_identifier', `extensions["${PAYMENT_IDENTIFIER}"] must be {info: {required, id}}`);
  const { id } = extension.info;
  if (id === undefined) return ok(undefined);
  if (!isValidPaymentId(id)) {
    const given = typeof id === 'string' ? `${id.length} characters` : `a ${id === null ? 'null' : typeof id}`;
    return fail(
      'invalid_payment_identifier',
      `extensions["${PAYMENT_IDENTIFIER}"].info.id must be ${PAYMENT_ID_MIN_LENGTH} to ${PAYMENT_ID_MAX_LENGTH} letters, digits, "_" or "-" (got ${given})`,
    );
  }
  return ok(id);
}

/** Whether a target's PAYMENT-REQUIRED declares payment-identifier (`{info: {required: boolean}}`). */
function declaresPaymentIdentifier(extensions: Record<string, unknown> | undefined): boolean {
  const extension = extensions?.[PAYMENT_IDENTIFIER];
  return isPlainObject(extension) && isPlainObject(extension.info) && typeof extension.info.required === 'boolean';
}

/**
 * The id of our own payment to a target: derived from the payment's recorded reference (on EVM the
 * authorization nonce), so every send of that payment (a retry, a job) carries the same id, and no
 * two payments share one.
 */
export function ourPaymentId(network: string, reference: string): string {
  return `prs_${createHash('sha256').update(`${network}\n${reference}`).digest('hex').slice(0, 40)}`;
}

/**
 * The extensions our PAYMENT-SIGNATURE echoes for a target's offer: the target's own, verbatim,
 * with our id added to payment-identifier's `info` when the target declares it (as
 * @x402/extensions' client does). The target's objects are not modified.
 */
export function extensionsForTarget(
  declared: Record<string, unknown> | undefined,
  paymentId: string,
): Record<string, unknown> | undefined {
  if (declared === undefined || !declaresPaymentIdentifier(declared)) return declared;
  const extension = declared[PAYMENT_IDENTIFIER] as { info: Record<string, unknown> };
  return { ...declared, [PAYMENT_IDENTIFIER]: { ...extension, info: { ...extension.info, id: paymentId } } };
}

/** A target's bazaar metadata larger than this (as JSON) is not passed on. */
export const MAX_BAZAAR_JSON_CHARS = 16 * 1024;

/**
 * A target's `bazaar` discovery metadata (its PAYMENT-REQUIRED's `extensions.bazaar`), as it sent
 * it, when it is an object whose JSON is at most MAX_BAZAAR_JSON_CHARS; else undefined.
 */
function bazaarOf(extensions: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  const bazaar = extensions?.[BAZAAR];
  if (!isPlainObject(bazaar)) return undefined;
  const json = JSON.stringify(bazaar);
  if (json.length > MAX_BAZAAR_JSON_CHARS) return undefined;
  return JSON.parse(json) as Record<string, unknown>;
}

/** The target's bazaar metadata as the dry runs show it: from a version 2 402 that declares it, bounded. */
export function withBazaar(required: TargetPaymentRequired): { bazaar?: Record<string, unknown> } {
  const bazaar = required.x402Version === 2 ? bazaarOf(required.extensions) : undefined;
  return bazaar === undefined ? {} : { bazaar };
}
