import type { Handler } from './types';
import { paidChat } from '../payments/operations/chat/call';
import { errorReply, LLM_FAILED_TITLE } from './errors';
import { chatFailureReply, resourceUrl } from './postLlmChat';
import { clientPaymentHeader, paymentResponseHeaders } from './x402Headers';

export const TRANSLATION_PROMPT =
  "Translate the user's text into Spanish. Answer with the translation only, without any comment.";

export const postLlmTranslate: Handler<'postLlmTranslate'> = async (ctx, deps) => {
  const read = clientPaymentHeader(ctx.headers);
  if (!read.ok) return errorReply('validation_failed', read.details);
  const { payment } = read;
  const outcome = await paidChat(deps, {
    payment,
    resource: resourceUrl(deps.baseUrl(), '/llm/translate'),
    description: 'Translation into Spanish',
    messages: [
      { role: 'system', content: TRANSLATION_PROMPT },
      { role: 'user', content: ctx.body.text },
    ],
  });
  if (outcome.kind !== 'answered') return chatFailureReply(outcome, LLM_FAILED_TITLE.postLlmTranslate, payment);
  return {
    status: 200,
    body: { translation: outcome.response, targetLanguage: 'es', model: outcome.model },
    headers: {
      ...(outcome.settlement ? paymentResponseHeaders(payment?.version ?? 1, outcome.settlement) : {}),
      ...(outcome.webhookId === undefined ? {} : { 'X-Service-Webhook': outcome.webhookId }),
    },
  };
};
