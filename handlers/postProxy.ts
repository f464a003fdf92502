import type { Handler, RawReply, Reply, RequestContext } from './types';
import type { Deps } from './deps';
import type { AuthenticatedKey } from '../payments/accounts/accounts';
import {
  IDEMPOTENCY_KEY_HEADER,
  readIdempotencyKey,
  requestFingerprint,
  type ClaimRef,
  type EndedMoney,
} from '../payments/basics/idempotency';
import { inProgressReply, keyReusedReply, pathWithFormat, runOnce, type RunAnswer } from './idempotency';
import type { CallRequest, TargetResponse } from '../payments/basics/http/index';
import { proxyCall, type ProxyPaymentReport } from '../payments/operations/proxy/call';
import { errorReply, requireApiKey, unreachable } from './errors';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';
import { belowFloorReply, callLimits, limitRefusalReply } from './limitRefusal';

export { callTimeoutMs, MAX_CLIENT_TIMEOUT_MS } from './targetReply';

function passThrough(response: TargetResponse, payment: ProxyPaymentReport | undefined, format: unknown): RawReply {
  // Our receipt of our payment to the target (the target's own x402 headers are not passed on),
  // and the credits charged for it once the chain showed it.
  const receipt: Record<string, string> = payment
    ? {
        'X-Payment-Response': payment.paymentResponse,
        ...(payment.chargedCredits === undefined ? {} : { 'X-Credits-Charged': payment.chargedCredits.toString() }),
      }
    : {};
  // We paid, and the chain has not shown the payment yet: the record says when it does.
  return targetReply(
    response,
    format,
    payment?.webhookId
      ? { ...receipt, 'X-Service-Status': 'payment_validating', 'X-Service-Webhook': payment.webhookId }
      : receipt,
  );
}

/** The call and its answer; kept for the key's repeats when the target was called (money may have moved). */
async function answer(
  ctx: RequestContext<'postProxy'>,
  deps: Deps,
  key: AuthenticatedKey,
  idempotency?: ClaimRef,
): Promise<RunAnswer<'postProxy'>> {
  const call = ctx.body as CallRequest;
  const outcome = await proxyCall(deps, {
    call,
    key,
    timeoutMs: callTimeoutMs(call.timeout, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
    requestId: ctx.requestId,
    limits: callLimits(ctx.body, key),
    ...(idempotency ? { idempotency } : {}),
  });
  switch (outcome.kind) {
    case 'pass_through':
      return { keep: true, reply: passThrough(outcome.response, outcome.payment, ctx.query.format) };
    case 'bad_request':
      return { keep: false, reply: errorReply('validation_failed', outcome.details) };
    case 'insufficient_credits':
      return { keep: false, reply: errorReply('insufficient_credits', outcome.details) };
    case 'policy_refused':
    case 'price_above_limit':
      return { keep: false, reply: limitRefusalReply(outcome) };
    case 'spend_limit':
      return { keep: false, reply: spendLimitReply(outcome.error, outcome) };
    case 'transfer_method_unsupported':
      return { keep: false, reply: errorReply('transfer_method_unsupported', outcome.details) };
    case 'asset_unsupported':
    case 'pay_to_account_missing':
      return { keep: false, reply: errorReply(outcome.kind, outcome.details) };
    case 'bad_gateway':
      return {
        keep: true,
        reply: {
          // Without upstreamStatus the target never answered (ProxyBadGateway).
          ...errorReply(
            outcome.upstreamStatus === undefined ? 'target_unreachable' : 'upstream_error',
            outcome.details,
            {
              message: outcome.message,
              ...(outcome.upstreamStatus === undefined ? {} : { upstreamStatus: outcome.upstreamStatus }),
              ...(outcome.webhookId === undefined ? {} : { webhook_id: outcome.webhookId }),
            },
          ),
          ...(outcome.webhookId === undefined ? {} : { headers: { 'X-Service-Webhook': outcome.webhookId } }),
        },
      };
    case 'wallet_below_floor':
      return { keep: false, reply: belowFloorReply(outcome, deps.config.floatRefreshSeconds) };
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy configuration error');
      return { keep: false, reply: errorReply('configuration_error', outcome.details, { message: outcome.message }) };
    default:
      return unreachable(outcome);
  }
}

/**
 * The answer to a repeat of a call whose process died, once its payment has ended: a 502 naming
 * what the chain decided (credits charged for a payment the target used, or released), with the
 * record to poll when one was opened. The target's own answer was never kept.
 */
function endedReply(money: EndedMoney): Reply<'postProxy'> {
  const charged = money.kind === 'proxy' ? money.chargedCredits : 0n;
  const txHashes = money.kind === 'proxy' ? money.txHashes : [];
  const webhookId = money.webhookId ?? undefined;
  const details =
    charged > 0n
      ? `The target was paid (${txHashes.join(', ') || 'on chain'}) and ${charged} credits were charged; the target's answer was lost with the process.`
      : 'The payment to the target never went through; the credits held for it were released.';
  return {
    ...errorReply('upstream_error', details, {
      message:
        'The service stopped while it ran the first call with this Idempotency-Key; it is not run again, and this is its outcome',
      ...(webhookId === undefined ? {} : { webhook_id: webhookId }),
    }),
    ...(webhookId === undefined ? {} : { headers: { 'X-Service-Webhook': webhookId } }),
  };
}

/**
 * POST /proxy. With an Idempotency-Key (scoped to the API key's account) the call runs once: a
 * repeat of the same request gets the kept answer and pays nothing; see handlers/idempotency.ts.
 */
export const postProxy: Handler<'postProxy'> = async (ctx, deps) => {
  const read = readIdempotencyKey(ctx.headers[IDEMPOTENCY_KEY_HEADER]);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const key = requireApiKey(ctx);
  if (read.value === undefined) return (await answer(ctx, deps, key)).reply;
  return runOnce({
    db: deps.db,
    log: deps.log,
    owner: deps.idempotencyOwner,
    id: { scope: `proxy:${key.accountId}`, key: read.value },
    fingerprint: requestFingerprint({
      method: 'POST',
      path: pathWithFormat('/proxy', ctx.query.format),
      body: ctx.body,
    }),
    operationId: 'postProxy',
    requestId: ctx.requestId,
    run: (claim) => answer(ctx, deps, key, claim),
    ended: endedReply,
    running: () =>
      inProgressReply(
        'A call with this Idempotency-Key is still running; ask again after Retry-After to get its answer. It is not run twice.',
      ),
    otherRequest: () =>
      Promise.resolve(
        keyReusedReply(
          'This Idempotency-Key was already used by this account with another request (method, URL or body); use a new key for a new call.',
        ),
      ),
  });
};
