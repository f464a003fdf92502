import type { Handler } from './types';
import { paidChat, type PaidChatOutcome } from '../payments/chat';
import type { ClientPaymentHeader } from '../payments/incoming/clientPayment';
import { errorReply, LLM_FAILED_TITLE, paymentRefusalCode, unreachable } from './errors';
import { clientPaymentHeader, paymentRequiredHeaders, paymentResponseHeaders } from './x402Headers';

export function resourceUrl(baseUrl: string, path: string): string {
  return `${baseUrl}${path}`;
}

/** The answers every paid chat operation shares, whatever its success body. */
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- E is also the inferred return type's 500 `error` (each operation's own title), inside errorReply's NoInfer, where the rule does not look
export function chatFailureReply<E extends string>(
  outcome: Exclude<PaidChatOutcome, { kind: 'answered' }>,
  failedError: E,
  payment: ClientPaymentHeader | undefined,
) {
  switch (outcome.kind) {
    case 'not_configured':
      return errorReply('llm_unavailable', 'No chat backend is configured on this server; nothing was charged.');
    case 'payment_required': {
      // A 402 answering a payment means that payment was refused: `code` says why, `error` in words.
      const reply = errorReply(paymentRefusalCode(payment !== undefined, outcome.reason), undefined, {
        x402Version: 1 as const,
        error: outcome.error,
        accepts: outcome.accepts.map((offer) => ({ ...offer, scheme: 'exact' as const })),
      });
      // The interface also carries the requirements in an x-payment header: the same body, as x402 encodes header data (base64 JSON).
      const inHeader = Buffer.from(JSON.stringify(reply.body), 'utf8').toString('base64');
      return {
        ...reply,
        headers: {
          'X-Service-Status': 'payment_required',
          'X-Payment': inHeader,
          ...paymentRequiredHeaders(outcome.accepts, outcome.reason === undefined ? undefined : outcome.error),
        },
      };
    }
    case 'payment_reused':
      return errorReply(
        'payment_reused',
        `This ${payment?.version === 2 ? 'PAYMENT-SIGNATURE' : 'X-Payment'} was already used: ${outcome.details}`,
      );
    case 'verification_unavailable':
      return errorReply(
        'verification_unavailable',
        `The payment could not be verified now; nothing was charged. ${outcome.details}`,
      );
    case 'backend_failed':
      return errorReply('llm_failed', undefined, {
        error: failedError,
        message: `The model did not answer; nothing was charged. ${outcome.details}`,
      });
    default:
      return unreachable(outcome);
  }
}

export const postLlmChat: Handler<'postLlmChat'> = async (ctx, deps) => {
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const { payment } = read;
  const outcome = await paidChat(deps, {
    payment,
    resource: resourceUrl(deps.baseUrl(), '/llm/chat'),
    description: `Chat completion with ${deps.config.llm.model ?? 'the configured model'}`,
    messages: ctx.body.messages,
    maxTokens: ctx.body.max_tokens,
    temperature: ctx.body.temperature,
  });
  if (outcome.kind !== 'answered') return chatFailureReply(outcome, LLM_FAILED_TITLE.postLlmChat, payment);
  return {
    status: 200,
    body: { response: outcome.response, model: outcome.model },
    headers: paymentResponseHeaders(payment?.version ?? 1, outcome.settlement),
  };
};
