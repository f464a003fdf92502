/**
 * The service's error codes and the one way to build an error answer of ours. The document's
 * ErrorCode enum is the contract; ERROR_CODES gives each code its status and its usual `error`
 * title, and is typed from the generated enum so that tsc fails when the two disagree (a code
 * missing here or one the document does not list). Answers passed through from a target are not
 * built here: they are the target's and carry no code.
 */
import type { components } from '../codegen/api';
import type { AuthenticatedKey } from '../payments/accounts/accounts';
import type { SettleFailureReason } from '../payments/incoming/settle';
import type { OperationId } from './types';

export type ErrorCode = components['schemas']['ErrorCode'];

export interface ErrorCodeEntry {
  status: number;
  /** The `error` title of the code; a few operations' schemas fix another one (spend limits, chat). */
  error: string;
}

export const ERROR_CODES = {
  validation_failed: { status: 400, error: 'Bad Request' },
  malformed_request: { status: 400, error: 'Bad Request' },
  payment_reused: { status: 400, error: 'Bad Request' },
  unauthorized: { status: 401, error: 'Unauthorized' },
  payment_required: { status: 402, error: 'Payment Required' },
  payment_invalid: { status: 402, error: 'Payment Required' },
  offer_mismatch: { status: 402, error: 'Payment Required' },
  amount_mismatch: { status: 402, error: 'Payment Required' },
  network_mismatch: { status: 402, error: 'Payment Required' },
  payment_expired: { status: 402, error: 'Payment Required' },
  insufficient_credits: { status: 402, error: 'Insufficient credits' },
  policy_refused: { status: 403, error: 'Forbidden' },
  not_found: { status: 404, error: 'Not Found' },
  method_not_allowed: { status: 405, error: 'Method Not Allowed' },
  request_timeout: { status: 408, error: 'Request Timeout' },
  idempotency_in_progress: { status: 409, error: 'Conflict' },
  payload_too_large: { status: 413, error: 'Payload Too Large' },
  idempotency_key_reused: { status: 422, error: 'Unprocessable Content' },
  price_above_limit: { status: 422, error: 'Price above limit' },
  transfer_method_unsupported: { status: 422, error: 'Unprocessable Content' },
  asset_unsupported: { status: 422, error: 'Unprocessable Content' },
  pay_to_account_missing: { status: 422, error: 'Unprocessable Content' },
  capacity_exceeded: { status: 429, error: 'Too Many Requests' },
  spend_limit_exceeded: { status: 429, error: 'Daily spending limit exceeded' },
  header_fields_too_large: { status: 431, error: 'Request Header Fields Too Large' },
  internal_error: { status: 500, error: 'Internal Server Error' },
  configuration_error: { status: 500, error: 'Internal Server Error' },
  llm_failed: { status: 500, error: 'Chat request failed' },
  not_implemented: { status: 501, error: 'Not Implemented' },
  upstream_error: { status: 502, error: 'Bad Gateway' },
  target_unreachable: { status: 502, error: 'Bad Gateway' },
  verification_unavailable: { status: 503, error: 'Service Unavailable' },
  llm_unavailable: { status: 503, error: 'Service Unavailable' },
  float_below_floor: { status: 503, error: 'Service Unavailable' },
  gas_below_floor: { status: 503, error: 'Service Unavailable' },
} as const satisfies Record<ErrorCode, ErrorCodeEntry>;

export type ErrorStatus<C extends ErrorCode> = (typeof ERROR_CODES)[C]['status'];

type DetailsPart<D extends string | undefined> = D extends string ? { details: string } : unknown;

/** The code's own title, unless `extra` sets another. */
type TitledCode<C extends ErrorCode> = { code: C; error: (typeof ERROR_CODES)[C]['error'] };

export type ErrorBodyOf<C extends ErrorCode, D extends string | undefined, X extends object> = Omit<
  TitledCode<C>,
  keyof X
> &
  DetailsPart<D> &
  X;

/**
 * `{code, error, details}` with the code's title; `extra` adds a variant's fields (message,
 * webhook_id, retryAfter, the x402 fields of a 402) and may set `error` where an operation's
 * schema fixes another title.
 */
export function errorBody<C extends ErrorCode, D extends string | undefined = undefined, X extends object = object>(
  code: C,
  details?: D,
  extra?: X,
): NoInfer<ErrorBodyOf<C, D, X>> {
  return {
    code,
    error: ERROR_CODES[code].error,
    ...(details === undefined ? {} : { details }),
    ...extra,
  } as unknown as ErrorBodyOf<C, D, X>;
}

/** A handler's error answer: the code's status and errorBody. */
export function errorReply<C extends ErrorCode, D extends string | undefined = undefined, X extends object = object>(
  code: C,
  details?: D,
  extra?: X,
  // NoInfer: the fields are the ones given, never guessed from the reply type the caller expects.
): NoInfer<{ status: ErrorStatus<C>; body: ErrorBodyOf<C, D, X> }> {
  return { status: ERROR_CODES[code].status, body: errorBody(code, details, extra) };
}

/** The codes of a 402 that answers a payment refused before anything moved. */
export type RefusedPaymentCode =
  'payment_invalid' | 'offer_mismatch' | 'amount_mismatch' | 'network_mismatch' | 'payment_expired';

/**
 * The reasons of payments/incoming (verification, then settlement) a client can act on, each with
 * its own code; any other reason of a 402 is payment_invalid (its `error` still names it).
 */
const REFUSAL_CODES: Partial<Record<SettleFailureReason, RefusedPaymentCode>> = {
  offer_mismatch: 'offer_mismatch',
  wrong_amount: 'amount_mismatch',
  network_not_offered: 'network_mismatch',
  expired: 'payment_expired',
  not_yet_valid: 'payment_expired',
};

/** The code of our 402: payment_required without a payment, else the refusal's own code. */
export function paymentRefusalCode(
  paid: boolean,
  reason: SettleFailureReason | undefined,
): RefusedPaymentCode | 'payment_required' {
  if (!paid) return 'payment_required';
  return (reason === undefined ? undefined : REFUSAL_CODES[reason]) ?? 'payment_invalid';
}

/** The `error` of the 500 each chat operation declares (ChatError, TranslateError). */
export const LLM_FAILED_TITLE = {
  postLlmChat: 'Chat request failed',
  postLlmTranslate: 'Translation request failed',
} as const;

type InternalErrorShape = { kind: 'details' } | { kind: 'message_and_details' } | { kind: 'message'; error: string };

const DETAILS: InternalErrorShape = { kind: 'details' };

/**
 * The shape of each operation's declared 500, for an exception no handler caught: most declare
 * ErrorBody; /proxy's InternalError adds `message`; the chat operations' bodies have `message`
 * instead of `details` and their own title. One row per operation, so that a new operation
 * cannot be left out.
 */
const INTERNAL_ERROR_SHAPE: Record<OperationId, InternalErrorShape> = {
  getBalance: DETAILS,
  getConfig: DETAILS,
  getConsole: DETAILS,
  getCreditsBalance: DETAILS,
  getDiscoveryResources: DETAILS,
  getDocs: DETAILS,
  getHealth: DETAILS,
  getHealthLive: DETAILS,
  getHealthReady: DETAILS,
  getLimits: DETAILS,
  getLlmHealth: DETAILS,
  getMetrics: DETAILS,
  getOpenApiDocument: DETAILS,
  getPayments: DETAILS,
  getRateLimitMetrics: DETAILS,
  getRelayLimits: DETAILS,
  getUsage: DETAILS,
  getWebhook: DETAILS,
  postCreditsPurchase: DETAILS,
  postLlmChat: { kind: 'message', error: LLM_FAILED_TITLE.postLlmChat },
  postLlmTranslate: { kind: 'message', error: LLM_FAILED_TITLE.postLlmTranslate },
  postMcp: DETAILS,
  postProxy: { kind: 'message_and_details' },
  postProxySim: DETAILS,
  postRelay: DETAILS,
  postRelaySim: DETAILS,
  postSim: DETAILS,
};

/** The 500 body of an unexpected exception, as the operation declares it; outside any operation, ErrorBody. */
export function internalErrorBody(operationId: string | undefined, requestId: string) {
  const reference = `quote request id ${requestId} when reporting it`;
  const shape =
    operationId !== undefined && Object.hasOwn(INTERNAL_ERROR_SHAPE, operationId)
      ? INTERNAL_ERROR_SHAPE[operationId as OperationId]
      : DETAILS;
  switch (shape.kind) {
    case 'details':
      return errorBody('internal_error', `An internal error occurred; ${reference}.`);
    case 'message_and_details':
      return errorBody('internal_error', reference, { message: 'The service could not complete the request.' });
    case 'message':
      return errorBody('internal_error', undefined, {
        error: shape.error,
        message: `An internal error occurred; ${reference}.`,
      });
    default:
      return unreachable(shape);
  }
}

/**
 * The key of an operation secured by x-api-key: the router authenticates it before the handler
 * runs (server/app.ts), so its absence is a bug of ours, answered as an internal error.
 */
export function requireApiKey(ctx: {
  operationId: OperationId;
  apiKey: AuthenticatedKey | undefined;
}): AuthenticatedKey {
  if (ctx.apiKey === undefined) throw new Error(`${ctx.operationId} ran without an authenticated API key`);
  return ctx.apiKey;
}

/** The default of an exhaustive switch: a new case of the union fails to compile here instead of answering nothing. */
export function unreachable(value: never): never {
  throw new Error(`unhandled case ${JSON.stringify(value)}`);
}
