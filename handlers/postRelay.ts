import type { Handler } from './types';
import type { CallRequest } from '../payments/outbound/index';
import { relayCall, type RelayHeaders } from '../payments/relay/call';
import { errorReply, unreachable } from './errors';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';

function headersOf(headers: RelayHeaders): Record<string, string> {
  const named: Record<string, string> = {};
  if (headers.clientPayment) named['X-Client-Payment'] = headers.clientPayment;
  if (headers.paymentResponse) named['X-Payment-Response'] = headers.paymentResponse;
  if (headers.webhookId) named['X-Service-Webhook'] = headers.webhookId;
  if (headers.refundWebhookId) named['X-Refund-Webhook-Id'] = headers.refundWebhookId;
  if (headers.serviceStatus) named['X-Service-Status'] = headers.serviceStatus;
  return named;
}

export const postRelay: Handler<'postRelay'> = async (ctx, deps) => {
  const call = ctx.body as CallRequest | undefined;
  if (!call || typeof call !== 'object')
    return errorReply('validation_failed', 'the body must be a call request with api_url and method');
  const header = ctx.headers['x-payment'];
  const outcome = await relayCall(deps, {
    call,
    paymentHeader: Array.isArray(header) ? header.join(', ') : header,
    resource: `${deps.baseUrl()}/relay`,
    timeoutMs: callTimeoutMs(undefined, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
  });
  switch (outcome.kind) {
    case 'pass_through':
      return targetReply(outcome.response, ctx.query.format, headersOf(outcome.headers));
    case 'payment_required':
      return {
        // A 402 answering a payment means that payment was refused; `error` says why.
        ...errorReply(header === undefined ? 'payment_required' : 'payment_invalid', undefined, {
          x402Version: 1 as const,
          error: outcome.error,
          accepts: outcome.accepts as never,
          serviceStatus: 'payment_required' as const,
        }),
        headers: { 'X-Service-Status': 'payment_required' },
      };
    case 'bad_request':
      return errorReply('validation_failed', outcome.details);
    case 'spend_limit':
      return spendLimitReply('Daily wallet spending limit exceeded', outcome);
    case 'bad_gateway':
      return {
        ...errorReply('upstream_error', undefined, {
          message: outcome.message,
          ...(outcome.headers.webhookId ? { webhook_id: outcome.headers.webhookId } : {}),
        }),
        headers: headersOf(outcome.headers),
      };
    case 'internal_error':
      ctx.log.error({ details: outcome.details }, 'relay internal error');
      return errorReply('internal_error', outcome.details);
    default:
      return unreachable(outcome);
  }
};
