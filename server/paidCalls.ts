/**
 * The outcome of a paid call, read from its handler's reply (the headers and codes the document
 * gives each case), for the metric of paid calls by mode and result. A call in which no payment
 * was involved (a target that did not charge, a relay or chat call sent without a payment, a
 * request refused before the target was asked) is not a paid call and is not counted.
 *
 * - proxy: X-Payment-Response names our payment to the target: `paid` when it settled, `pending`
 *   while a job watches it (X-Service-Webhook), `refunded` when it provably never will (the credits
 *   were released). A 502 with a webhook record after we paid is `pending`. `failed`: the target
 *   asked for a payment and none was made (insufficient credits, a daily limit, a payment we
 *   cannot make or prepare).
 * - relay (the client sent a payment): `refunded` when a refund was issued (X-Refund-Webhook-Id),
 *   `pending` while the outcome is watched (X-Service-Status payment_validating, or a webhook
 *   record), `paid` when the target was paid and answered, `failed` otherwise (the payment was
 *   refused, or nothing moved).
 * - chat (/llm/chat and /llm/translate, with a payment): `paid` on a 200, `failed` otherwise
 *   (nothing was charged).
 *
 * A kept answer replayed for a repeated Idempotency-Key (Idempotent-Replayed: true) ran no call
 * and moved no money: it was counted when the call ran, and is not counted again.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { OperationId, Reply } from '../handlers/types';
import type { PaidCallMode, PaidCallResult } from './metrics';

const MODES: Partial<Record<OperationId, PaidCallMode>> = {
  postProxy: 'proxy',
  postRelay: 'relay',
  postLlmChat: 'chat',
  postLlmTranslate: 'chat',
};

function headerOf(reply: Reply<OperationId>, name: string): string | undefined {
  if (!reply.headers) return undefined;
  for (const [key, value] of Object.entries(reply.headers)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}

/** The `success` of an X-Payment-Response (base64 JSON), or undefined when it cannot be read. */
function settled(receipt: string): boolean | undefined {
  try {
    const decoded = JSON.parse(Buffer.from(receipt, 'base64').toString('utf8')) as { success?: unknown };
    return typeof decoded.success === 'boolean' ? decoded.success : undefined;
  } catch {
    return undefined;
  }
}

function bodyField(reply: Reply<OperationId>, name: string): unknown {
  if ('raw' in reply) return undefined;
  const body = reply.body as Record<string, unknown> | null | undefined;
  return typeof body === 'object' && body !== null ? body[name] : undefined;
}

function proxyResult(reply: Reply<OperationId>): PaidCallResult | undefined {
  const receipt = headerOf(reply, 'x-payment-response');
  const watched = headerOf(reply, 'x-service-webhook') !== undefined;
  if (receipt !== undefined) {
    if (settled(receipt)) return 'paid';
    return watched ? 'pending' : 'refunded';
  }
  if (watched || bodyField(reply, 'webhook_id') !== undefined) return 'pending';
  const code = bodyField(reply, 'code');
  if (code === 'insufficient_credits' || code === 'spend_limit_exceeded' || code === 'configuration_error')
    return 'failed';
  // The target asks for a payment the service does not or cannot make.
  if (reply.status === 502 && bodyField(reply, 'upstreamStatus') === 402) return 'failed';
  return undefined;
}

function relayResult(reply: Reply<OperationId>): PaidCallResult {
  if (headerOf(reply, 'x-refund-webhook-id') !== undefined) return 'refunded';
  if (
    headerOf(reply, 'x-service-status') === 'payment_validating' ||
    headerOf(reply, 'x-service-webhook') !== undefined
  )
    return 'pending';
  const receipt = headerOf(reply, 'x-payment-response');
  if (receipt !== undefined && settled(receipt)) return 'paid';
  // The client's payment settled and the target answered without asking to be paid.
  if ('raw' in reply && headerOf(reply, 'x-client-payment') !== undefined) return 'paid';
  return 'failed';
}

function carriesPayment(headers: IncomingHttpHeaders): boolean {
  return headers['x-payment'] !== undefined || headers['payment-signature'] !== undefined;
}

export function paidCallOutcome(
  operationId: OperationId,
  requestHeaders: IncomingHttpHeaders,
  reply: Reply<OperationId>,
): { mode: PaidCallMode; result: PaidCallResult } | undefined {
  const mode = MODES[operationId];
  if (mode === undefined || headerOf(reply, 'idempotent-replayed') === 'true') return undefined;
  if (mode === 'proxy') {
    const result = proxyResult(reply);
    return result === undefined ? undefined : { mode, result };
  }
  if (!carriesPayment(requestHeaders)) return undefined;
  if (mode === 'relay') return { mode, result: relayResult(reply) };
  return { mode, result: reply.status === 200 ? 'paid' : 'failed' };
}
