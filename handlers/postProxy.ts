import type { Handler, RawReply } from './types';
import type { CallRequest, TargetResponse } from '../payments/outbound/index';
import { proxyCall } from '../payments/proxy/call';
import { errorReply, requireApiKey, unreachable } from './errors';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';

export { callTimeoutMs, MAX_CLIENT_TIMEOUT_MS } from './targetReply';

function passThrough(
  response: TargetResponse,
  payment: { charged: boolean; webhookId?: string; paymentResponse: string } | undefined,
  format: unknown,
): RawReply {
  // Our receipt of our payment to the target (the target's own x402 headers are not passed on).
  const receipt: Record<string, string> = payment ? { 'X-Payment-Response': payment.paymentResponse } : {};
  // We paid, and the chain has not shown the payment yet: the record says when it does.
  return targetReply(
    response,
    format,
    payment?.webhookId
      ? { ...receipt, 'X-Service-Status': 'payment_validating', 'X-Service-Webhook': payment.webhookId }
      : receipt,
  );
}

export const postProxy: Handler<'postProxy'> = async (ctx, deps) => {
  const call = ctx.body as CallRequest;
  const outcome = await proxyCall(deps, {
    call,
    key: requireApiKey(ctx),
    timeoutMs: callTimeoutMs(call.timeout, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
    requestId: ctx.requestId,
  });
  switch (outcome.kind) {
    case 'pass_through':
      return passThrough(outcome.response, outcome.payment, ctx.query.format);
    case 'bad_request':
      return errorReply('validation_failed', outcome.details);
    case 'insufficient_credits':
      return errorReply('insufficient_credits', outcome.details);
    case 'spend_limit':
      return spendLimitReply(outcome.error, outcome);
    case 'bad_gateway':
      return {
        // Without upstreamStatus the target never answered (ProxyBadGateway).
        ...errorReply(outcome.upstreamStatus === undefined ? 'target_unreachable' : 'upstream_error', outcome.details, {
          message: outcome.message,
          ...(outcome.upstreamStatus === undefined ? {} : { upstreamStatus: outcome.upstreamStatus }),
          ...(outcome.webhookId === undefined ? {} : { webhook_id: outcome.webhookId }),
        }),
        ...(outcome.webhookId === undefined ? {} : { headers: { 'X-Service-Webhook': outcome.webhookId } }),
      };
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy configuration error');
      return errorReply('configuration_error', outcome.details, { message: outcome.message });
    default:
      return unreachable(outcome);
  }
};
