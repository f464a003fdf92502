import type { Handler, Reply, RequestContext } from './types';
import type { HandlerDeps } from './deps';
import {
  paymentHeaderName,
  paymentIdOf,
  receivedPayment,
  type ReceivedPayment,
} from '../payments/incoming/clientPayment';
import {
  callIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  readIdempotencyKey,
  requestFingerprint,
  type ClaimRef,
  type EndedMoney,
} from '../payments/basics/idempotency';
import { paymentIdentity, relayIdempotencyScope } from '../payments/operations/relay/retries';
import { inProgressReply, keyReusedReply, pathWithFormat, runOnce, type RunAnswer } from './idempotency';
import type { CallRequest } from '../payments/basics/http/index';
import { checkRelayPayment, relayCall, type RelayHeaders, type RelayOutcome } from '../payments/operations/relay/call';
import type { X402Version } from '../payments/x402/v2';
import { errorReply, paymentRefusalCode, unreachable } from './errors';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';
import { belowFloorReply, priceAboveLimitReply } from './limitRefusal';
import { maxAmountOf } from '../payments/accounts/policy';
import { clientPaymentHeader, paymentRequiredHeaders, paymentResponseHeaders } from './x402Headers';

/**
 * Our headers of a relay answer. X-Payment-Response describes the service's payment to the target
 * (the interface's promise, whatever the client's version); a client that paid in version 2 also
 * gets PAYMENT-RESPONSE, the receipt of its own payment, once it is settled.
 */
function headersOf(headers: RelayHeaders, version: X402Version | undefined): Record<string, string> {
  const named: Record<string, string> = {};
  if (headers.clientPayment) named['X-Client-Payment'] = headers.clientPayment;
  if (headers.paymentResponse) named['X-Payment-Response'] = headers.paymentResponse;
  if (version === 2 && headers.clientSettlement)
    Object.assign(named, paymentResponseHeaders(2, headers.clientSettlement));
  if (headers.webhookId) named['X-Service-Webhook'] = headers.webhookId;
  if (headers.refundWebhookId) named['X-Refund-Webhook-Id'] = headers.refundWebhookId;
  if (headers.serviceStatus) named['X-Service-Status'] = headers.serviceStatus;
  return named;
}

function relayInput(
  ctx: RequestContext<'postRelay'>,
  deps: HandlerDeps,
  call: CallRequest,
  payment: ReceivedPayment | undefined,
  idempotency?: ClaimRef,
) {
  return {
    call,
    ...(idempotency ? { idempotency } : {}),
    payment,
    resource: `${deps.baseUrl()}/relay`,
    maxAmountMicroUsdc: maxAmountOf(call as { max_amount?: string }),
    timeoutMs: callTimeoutMs(undefined, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
  };
}

/** The call and its answer; kept for repeats when the client's payment may have moved (a target answer or a 502). */
async function answer(
  ctx: RequestContext<'postRelay'>,
  deps: HandlerDeps,
  call: CallRequest,
  payment: ReceivedPayment | undefined,
  idempotency?: ClaimRef,
): Promise<RunAnswer<'postRelay'>> {
  return replyOf(
    ctx,
    await relayCall(deps, relayInput(ctx, deps, call, payment, idempotency)),
    payment,
    deps.config.floatRefreshSeconds,
  );
}

const ENDED_OUTCOME: Record<Extract<EndedMoney, { kind: 'relay' }>['state'], string> = {
  delivered: 'the target was paid for it, so your payment is kept; its answer was lost with the process',
  refunded: 'the target was not paid, and your payment was refunded',
  refund_failed:
    'the target was not paid; refunding your payment failed and is retried by an operator (see the record)',
  settle_failed: 'your payment never settled; nothing was charged',
};

/**
 * The answer to a repeat of a call whose process died, once the jobs have ended its relay
 * transaction: a 502 saying how it ended, with the record to poll (X-Refund-Webhook-Id too when
 * the client was refunded) and the client's settled payment. The target's own answer was never kept.
 */
function endedReply(money: EndedMoney): Reply<'postRelay'> {
  const relay = money.kind === 'relay' ? money : undefined;
  const outcome = relay ? ENDED_OUTCOME[relay.state] : 'nothing was charged';
  const webhookId = money.webhookId ?? undefined;
  const headers: Record<string, string> = {};
  if (relay?.clientTxHash && relay.state !== 'settle_failed') headers['X-Client-Payment'] = relay.clientTxHash;
  if (webhookId !== undefined) {
    headers['X-Service-Webhook'] = webhookId;
    if (relay?.state === 'refunded' || relay?.state === 'refund_failed') headers['X-Refund-Webhook-Id'] = webhookId;
  }
  return {
    ...errorReply('upstream_error', undefined, {
      message: `The service stopped while it ran the first call with this payment; it is not run again: ${outcome}`,
      ...(webhookId === undefined ? {} : { webhook_id: webhookId }),
    }),
    headers,
  };
}

function replyOf(
  ctx: RequestContext<'postRelay'>,
  outcome: RelayOutcome,
  payment: ReceivedPayment | undefined,
  retryAfter: number,
): RunAnswer<'postRelay'> {
  switch (outcome.kind) {
    case 'pass_through':
      return {
        keep: true,
        reply: targetReply(outcome.response, ctx.query.format, headersOf(outcome.headers, payment?.version)),
      };
    case 'payment_required':
      return {
        keep: false,
        reply: {
          // A 402 answering a payment means that payment was refused: `code` says why, `error` in words.
          ...errorReply(paymentRefusalCode(payment !== undefined, outcome.reason), undefined, {
            x402Version: 1 as const,
            error: outcome.error,
            accepts: outcome.accepts as never,
            serviceStatus: 'payment_required' as const,
          }),
          headers: {
            'X-Service-Status': 'payment_required',
            ...paymentRequiredHeaders(outcome.accepts, outcome.reason === undefined ? undefined : outcome.error, {
              paymentIdentifier: true,
              offeredFirst: outcome.uptoAccepts ?? [],
            }),
          },
        },
      };
    case 'bad_request':
      return {
        keep: false,
        reply: errorReply(
          outcome.reason === 'nonce_already_used' ? 'payment_reused' : 'validation_failed',
          outcome.details,
        ),
      };
    case 'price_above_limit':
      return { keep: false, reply: priceAboveLimitReply(outcome) };
    case 'spend_limit':
      return { keep: false, reply: spendLimitReply('Daily wallet spending limit exceeded', outcome) };
    case 'transfer_method_unsupported':
      return { keep: false, reply: errorReply('transfer_method_unsupported', outcome.details) };
    case 'asset_unsupported':
    case 'pay_to_account_missing':
      return { keep: false, reply: errorReply(outcome.kind, outcome.details) };
    case 'target_not_payable':
      return { keep: false, reply: errorReply('upstream_error', undefined, { message: outcome.message }) };
    case 'bad_gateway':
      return {
        keep: true,
        reply: {
          ...errorReply('upstream_error', undefined, {
            message: outcome.message,
            ...(outcome.headers.webhookId ? { webhook_id: outcome.headers.webhookId } : {}),
          }),
          headers: headersOf(outcome.headers, payment?.version),
        },
      };
    case 'wallet_below_floor':
      return { keep: false, reply: belowFloorReply(outcome, retryAfter) };
    case 'internal_error':
      ctx.log.error({ details: outcome.details }, 'relay internal error');
      return { keep: false, reply: errorReply('internal_error', outcome.details) };
    default:
      return unreachable(outcome);
  }
}

/**
 * POST /relay. A paid call runs once per Idempotency-Key (per paying wallet; the id of a version 2
 * payment's payment-identifier extension is the same key, and both at once must agree) or, without a key, per
 * payment: a repeat of the same request gets the kept answer (409 while the first runs) and moves
 * no money. The same payment for another request is refused as already used; the same key for
 * another request is a 422. Calls without a payment move nothing and are not recorded.
 */
export const postRelay: Handler<'postRelay'> = async (ctx, deps) => {
  const call = ctx.body as CallRequest | undefined;
  if (!call || typeof call !== 'object')
    return errorReply('validation_failed', 'the body must be a call request with api_url and method');
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const keyRead = readIdempotencyKey(ctx.headers[IDEMPOTENCY_KEY_HEADER]);
  if (!keyRead.ok) return errorReply('validation_failed', keyRead.details);
  // The payment is decoded here, once: the call, its idempotency scope and a retry's proof use it.
  const payment = read.payment && receivedPayment(read.payment);
  const run = async () => (await answer(ctx, deps, call, payment)).reply;
  if (payment === undefined) return run();
  const { decoded } = payment;
  // A malformed payment is refused by the call itself, before anything moves.
  if (!decoded.ok) return run();
  // A payment-identifier id in the payment means what Idempotency-Key means; both must then agree.
  const paymentId = paymentIdOf(decoded.value);
  if (!paymentId.ok) return errorReply('validation_failed', paymentId.details);
  const keyed = callIdempotencyKey(keyRead.value, paymentId.value);
  if (!keyed.ok) return errorReply('validation_failed', keyed.details);
  const { value: key } = keyed;
  // A channel voucher is no one-time payment: the same voucher pays the next call after a failed
  // one, and the channel's own lease and unique cumulative amounts keep it from paying twice.
  if (
    key === undefined &&
    decoded.value.version === 2 &&
    decoded.value.signature.accepted.scheme === 'batch-settlement'
  )
    return run();
  const named = paymentHeaderName(payment.version);
  return runOnce({
    db: deps.db,
    log: deps.log,
    owner: deps.idempotencyOwner,
    id: relayIdempotencyScope(decoded.value, key),
    fingerprint: requestFingerprint({
      method: 'POST',
      path: pathWithFormat('/relay', ctx.query.format),
      body: call,
    }),
    operationId: 'postRelay',
    requestId: ctx.requestId,
    run: (claim) => answer(ctx, deps, call, payment, claim),
    ended: endedReply,
    running: () =>
      inProgressReply(
        key === undefined
          ? `A call paid with this ${named} is still running; ask again after Retry-After to get its answer. The payment is not taken twice.`
          : 'A call with this Idempotency-Key (or payment-identifier id) is still running; ask again after Retry-After to get its answer. It is not run or paid twice.',
      ),
    // The same payment for another request: refused by the call as already used (nothing moves).
    // The payer of a key is read from a payment not verified yet: a repeat with another payment proves it would pay.
    ...(key === undefined
      ? {}
      : {
          proof: {
            payment: paymentIdentity(decoded.value),
            check: async () => {
              const refusal = await checkRelayPayment(deps, relayInput(ctx, deps, call, payment));
              return refusal === undefined
                ? undefined
                : replyOf(ctx, refusal, payment, deps.config.floatRefreshSeconds).reply;
            },
          },
        }),
    otherRequest:
      key === undefined
        ? run
        : () =>
            Promise.resolve(
              keyReusedReply(
                'This Idempotency-Key (or payment-identifier id) was already used by this payer with another request (method, URL or body); use a new key for a new call.',
              ),
            ),
  });
};
