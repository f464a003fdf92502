import type { Handler, RawReply } from './types';
import type { CallRequest, TargetResponse } from '../payments/outbound/index';
import { proxyCall } from '../payments/proxy/call';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';

export { callTimeoutMs, MAX_CLIENT_TIMEOUT_MS } from './targetReply';

function passThrough(response: TargetResponse, payment: { charged: boolean; webhookId?: string } | undefined, format: unknown): RawReply {
  // We paid, and the chain has not shown the payment yet: the record says when it does.
  return targetReply(response, format, payment?.webhookId ? { 'X-Service-Status': 'payment_validating', 'X-Service-Webhook': payment.webhookId } : {});
}

export const postProxy: Handler<'postProxy'> = async (ctx, deps) => {
  const call = ctx.body as CallRequest;
  const outcome = await proxyCall(deps, {
    call,
    key: ctx.apiKey!,
    timeoutMs: callTimeoutMs(call.timeout, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
    requestId: ctx.requestId,
  });
  switch (outcome.kind) {
    case 'pass_through':
      return passThrough(outcome.response, outcome.payment, ctx.query.format);
    case 'bad_request':
      return { status: 400, body: { error: 'Bad Request', details: outcome.details } };
    case 'insufficient_credits':
      return { status: 402, body: { error: 'Insufficient credits', details: outcome.details } };
    case 'spend_limit':
      return spendLimitReply(outcome.error, outcome);
    case 'bad_gateway':
      return {
        status: 502,
        body: {
          error: 'Bad Gateway',
          message: outcome.message,
          details: outcome.details,
          ...(outcome.upstreamStatus === undefined ? {} : { upstreamStatus: outcome.upstreamStatus }),
          ...(outcome.webhookId === undefined ? {} : { webhook_id: outcome.webhookId }),
        },
        ...(outcome.webhookId === undefined ? {} : { headers: { 'X-Service-Webhook': outcome.webhookId } }),
      };
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy configuration error');
      return { status: 500, body: { error: 'Internal Server Error', message: outcome.message, details: outcome.details } };
  }
};
