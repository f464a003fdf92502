import type { Handler } from './types';
import { checkChatPayment, paidChat, type PaidChatOutcome } from '../payments/operations/chat/call';
import { paymentIdOf, receivedPayment, type ClientPaymentHeader } from '../payments/incoming/clientPayment';
import {
  callIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  readIdempotencyKey,
  requestFingerprint,
  type ClaimRef,
  type EndedMoney,
} from '../payments/basics/idempotency';
import { keyedIdempotencyScope, paymentIdentity } from '../payments/operations/relay/retries';
import { inProgressReply, keyReusedReply, runOnce, type RunAnswer } from './idempotency';
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
  { paymentIdentifier = false }: { paymentIdentifier?: boolean } = {},
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
          ...paymentRequiredHeaders(outcome.accepts, outcome.reason === undefined ? undefined : outcome.error, {
            paymentIdentifier,
            offeredFirst: outcome.channelAccepts ?? [],
          }),
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

const CHAT_ENDED_OUTCOME: Record<Extract<EndedMoney, { kind: 'relay' }>['state'], string> = {
  delivered: 'your payment was settled for an answer that was lost with the process',
  refunded: 'your payment was refunded',
  refund_failed: 'refunding your payment failed and is retried by an operator',
  settle_failed: 'your payment never settled; nothing was charged',
};

/**
 * POST /llm/chat. A chat paid under a key (Idempotency-Key, or the id of the payment's
 * payment-identifier extension, which means the same; both at once must agree) runs once per key
 * and payer: a repeat of the same request gets the kept answer (409 while the first runs) and is
 * never charged twice; the same key for another request is a 422. Without a key a payment is
 * accepted once, as before.
 */
export const postLlmChat: Handler<'postLlmChat'> = async (ctx, deps) => {
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const keyRead = readIdempotencyKey(ctx.headers[IDEMPOTENCY_KEY_HEADER]);
  if (!keyRead.ok) return errorReply('validation_failed', keyRead.details);
  const { payment } = read;
  const resource = resourceUrl(deps.baseUrl(), '/llm/chat');
  const description = `Chat completion with ${deps.config.llm.model ?? 'the configured model'}`;
  const chat = async (idempotency?: ClaimRef): Promise<RunAnswer<'postLlmChat'>> => {
    const outcome = await paidChat(deps, {
      payment,
      resource,
      description,
      messages: ctx.body.messages,
      maxTokens: ctx.body.max_tokens,
      temperature: ctx.body.temperature,
      ...(idempotency ? { idempotency } : {}),
    });
    if (outcome.kind !== 'answered')
      return {
        keep: false,
        reply: chatFailureReply(outcome, LLM_FAILED_TITLE.postLlmChat, payment, { paymentIdentifier: true }),
      };
    return {
      keep: true,
      reply: {
        status: 200,
        body: { response: outcome.response, model: outcome.model },
        headers: {
          ...(outcome.settlement ? paymentResponseHeaders(payment?.version ?? 1, outcome.settlement) : {}),
          ...(outcome.webhookId === undefined ? {} : { 'X-Service-Webhook': outcome.webhookId }),
        },
      },
    };
  };
  const received = payment && receivedPayment(payment);
  // Without a payment (or with a malformed one) nothing can move: the call answers as it always did.
  if (payment === undefined || received === undefined || !received.decoded.ok) return (await chat()).reply;
  const decoded = received.decoded.value;
  const paymentId = paymentIdOf(decoded);
  if (!paymentId.ok) return errorReply('validation_failed', paymentId.details);
  const keyed = callIdempotencyKey(keyRead.value, paymentId.value);
  if (!keyed.ok) return errorReply('validation_failed', keyed.details);
  const key = keyed.value;
  if (key === undefined) return (await chat()).reply;
  return runOnce({
    db: deps.db,
    log: deps.log,
    owner: deps.idempotencyOwner,
    id: keyedIdempotencyScope('chat', decoded, key),
    fingerprint: requestFingerprint({ method: 'POST', path: '/llm/chat', body: ctx.body }),
    operationId: 'postLlmChat',
    requestId: ctx.requestId,
    run: (claim) => chat(claim),
    running: () =>
      inProgressReply(
        'A chat with this Idempotency-Key (or payment-identifier id) is still running; ask again after Retry-After to get its answer. It is not charged twice.',
      ),
    ended: (money) =>
      errorReply('internal_error', undefined, {
        error: LLM_FAILED_TITLE.postLlmChat,
        message: `The service stopped while it ran the first chat with this key; it is not run again: ${money.kind === 'relay' ? CHAT_ENDED_OUTCOME[money.state] : 'nothing was charged'}`,
      }),
    otherRequest: () =>
      Promise.resolve(
        keyReusedReply(
          'This Idempotency-Key (or payment-identifier id) was already used by this payer with another chat request; use a new key for a new call.',
        ),
      ),
    // The payer of a key is read from a payment not verified yet: a repeat with another payment proves it would pay.
    proof: {
      payment: paymentIdentity(decoded),
      check: async () => {
        const refusal = await checkChatPayment(deps, { payment, resource, description });
        return refusal === undefined
          ? undefined
          : chatFailureReply(refusal, LLM_FAILED_TITLE.postLlmChat, payment, { paymentIdentifier: true });
      },
    },
  });
};
