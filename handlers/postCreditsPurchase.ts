/**
 * POST /v1/credits/purchase: credits for the key's organisation, paid over x402 (payments/operations/purchase/call.ts).
 * Without a payment: our 402 for the credits' price. With one: 200 once it settled and the credits
 * were added, 202 with the webhook record while it settles; the same payment again gets that answer.
 */
import type { Handler } from './types';
import { buyCredits, type PurchaseAnswer } from '../payments/operations/purchase/call';
import { REPLAYED_HEADER } from './idempotency';
import { errorReply, paymentRefusalCode, requireApiKey, unreachable } from './errors';
import { resourceUrl } from './postLlmChat';
import { clientPaymentHeader, paymentRequiredHeaders, paymentResponseHeaders } from './x402Headers';

function bodyOf(answer: PurchaseAnswer) {
  return {
    status: answer.status,
    credits: Number(answer.credits),
    amount: answer.amountMicroUsdc.toString(),
    network: answer.network,
    payer: answer.payer,
    ...(answer.transaction === undefined ? {} : { transaction: answer.transaction }),
    ...(answer.balanceCredits === undefined ? {} : { balance: Number(answer.balanceCredits) }),
    webhook_id: answer.webhookId,
  };
}

export const postCreditsPurchase: Handler<'postCreditsPurchase'> = async (ctx, deps) => {
  const key = requireApiKey(ctx);
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const { payment } = read;
  const outcome = await buyCredits(deps, {
    key,
    credits: BigInt(ctx.body.credits),
    payment,
    resource: resourceUrl(deps.baseUrl(), '/v1/credits/purchase'),
  });
  switch (outcome.kind) {
    case 'payment_required':
      return {
        ...errorReply(paymentRefusalCode(payment !== undefined, outcome.reason), undefined, {
          x402Version: 1 as const,
          error: outcome.error,
          accepts: outcome.accepts.map((offer) => ({ ...offer, scheme: 'exact' as const })),
        }),
        headers: {
          'X-Service-Status': 'payment_required',
          ...paymentRequiredHeaders(outcome.accepts, outcome.reason === undefined ? undefined : outcome.error, {
            offeredFirst: outcome.channelAccepts ?? [],
          }),
        },
      };
    case 'payment_reused':
      return errorReply('payment_reused', `This payment was already used: ${outcome.details}`);
    case 'verification_unavailable':
      return errorReply(
        'verification_unavailable',
        `The payment could not be verified now; nothing was credited. ${outcome.details}`,
      );
    case 'answered': {
      const { answer } = outcome;
      const headers: Record<string, string> = {
        'X-Service-Webhook': answer.webhookId,
        ...(answer.settlement ? paymentResponseHeaders(payment?.version ?? 1, answer.settlement) : {}),
        ...(outcome.replayed ? { [REPLAYED_HEADER]: 'true' } : {}),
      };
      return answer.status === 'credited'
        ? { status: 200, body: bodyOf(answer), headers }
        : { status: 202, body: bodyOf(answer), headers };
    }
    default:
      return unreachable(outcome);
  }
};
