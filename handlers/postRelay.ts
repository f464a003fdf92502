import type { Handler } from './types';
import type { CallRequest } from '../payments/outbound/index';
import { relayCall, type RelayHeaders } from '../payments/relay/call';
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
  if (!call || typeof call !== 'object') return { status: 400, body: { error: 'Bad Request', details: 'the body must be a call request with api_url and method' } };
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
        status: 402,
        body: { x402Version: 1, error: outcome.error, accepts: outcome.accepts as never, serviceStatus: 'payment_required' },
        headers: { 'X-Service-Status': 'payment_required' },
      };
    case 'bad_request':
      return { status: 400, body: { error: 'Bad Request', details: outcome.details } };
    case 'spend_limit':
      return spendLimitReply('Daily wallet spending limit exceeded', outcome);
    case 'bad_gateway':
      return {
        status: 502,
        body: { error: 'Bad Gateway', message: outcome.message, ...(outcome.headers.webhookId ? { webhook_id: outcome.headers.webhookId } : {}) },
        headers: headersOf(outcome.headers),
      };
    case 'internal_error':
      ctx.log.error({ details: outcome.details }, 'relay internal error');
      return { status: 500, body: { error: 'Internal Server Error', details: outcome.details } };
  }
};
