import type { Handler } from './types';
import { paidChat, type PaidChatOutcome } from '../payments/chat';

export function paymentHeaderOf(headers: Record<string, string | string[] | undefined>): string | undefined {
  const value = headers['x-payment'];
  return Array.isArray(value) ? value[0] : value;
}

export function resourceUrl(baseUrl: string, path: string): string {
  return `${baseUrl}${path}`;
}

/** The answers every paid chat operation shares, whatever its success body. */
export function chatFailureReply<E extends string>(outcome: Exclude<PaidChatOutcome, { kind: 'answered' }>, failedError: E) {
  switch (outcome.kind) {
    case 'not_configured':
      return { status: 503 as const, body: { error: 'Service Unavailable', details: 'No chat backend is configured on this server; nothing was charged.' } };
    case 'payment_required': {
      const body = { x402Version: 1 as const, error: outcome.error, accepts: outcome.accepts.map((offer) => ({ ...offer, scheme: 'exact' as const })) };
      // The interface also carries the requirements in an x-payment header: the same body, as x402 encodes header data (base64 JSON).
      const inHeader = Buffer.from(JSON.stringify(body), 'utf8').toString('base64');
      return { status: 402 as const, body, headers: { 'X-Service-Status': 'payment_required', 'X-Payment': inHeader } };
    }
    case 'payment_reused':
      return { status: 400 as const, body: { error: 'Bad Request', details: `This X-Payment was already used: ${outcome.details}` } };
    case 'verification_unavailable':
      return { status: 503 as const, body: { error: 'Service Unavailable', details: `The payment could not be verified now; nothing was charged. ${outcome.details}` } };
    case 'backend_failed':
      return { status: 500 as const, body: { error: failedError, message: `The model did not answer; nothing was charged. ${outcome.details}` } };
  }
}

export const postLlmChat: Handler<'postLlmChat'> = async (ctx, deps) => {
  const outcome = await paidChat(deps, {
    paymentHeader: paymentHeaderOf(ctx.headers),
    resource: resourceUrl(deps.baseUrl(), '/llm/chat'),
    description: `Chat completion with ${deps.config.llm.model ?? 'the configured model'}`,
    messages: ctx.body.messages,
    maxTokens: ctx.body.max_tokens,
    temperature: ctx.body.temperature,
  });
  if (outcome.kind !== 'answered') return chatFailureReply(outcome, 'Chat request failed');
  return {
    status: 200,
    body: { response: outcome.response, model: outcome.model },
    headers: { 'X-Payment-Response': outcome.paymentResponse },
  };
};
