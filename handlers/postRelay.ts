import type { Handler } from './types';
import type { CallRequest } from '../payments/outbound/index';
import { relayCall, type RelayHeaders } from '../payments/relay/call';
import type { X402Version } from '../payments/x402/v2';
import { errorReply, unreachable } from './errors';
import { callTimeoutMs, spendLimitReply, targetReply } from './targetReply';
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

export const postRelay: Handler<'postRelay'> = async (ctx, deps) => {
  const call = ctx.body as CallRequest | undefined;
  if (!call || typeof call !== 'object')
    return errorReply('validation_failed', 'the body must be a call request with api_url and method');
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const { payment } = read;
  const outcome = await relayCall(deps, {
    call,
    paymentHeader: payment?.value,
    ...(payment ? { paymentVersion: payment.version } : {}),
    resource: `${deps.baseUrl()}/relay`,
    timeoutMs: callTimeoutMs(undefined, ctx.headers['x-timeout'], deps.config.targetTimeoutMs),
  });
  switch (outcome.kind) {
    case 'pass_through':
      return targetReply(outcome.response, ctx.query.format, headersOf(outcome.headers, payment?.version));
    case 'payment_required':
      return {
        // A 402 answering a payment means that payment was refused; `error` says why.
        ...errorReply(payment === undefined ? 'payment_required' : 'payment_invalid', undefined, {
          x402Version: 1 as const,
          error: outcome.error,
          accepts: outcome.accepts as never,
          serviceStatus: 'payment_required' as const,
        }),
        headers: { 'X-Service-Status': 'payment_required', ...paymentRequiredHeaders(outcome.accepts, outcome.error) },
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
        headers: headersOf(outcome.headers, payment?.version),
      };
    case 'internal_error':
      ctx.log.error({ details: outcome.details }, 'relay internal error');
      return errorReply('internal_error', outcome.details);
    default:
      return unreachable(outcome);
  }
};
