import type { Handler } from './types';
import { paidChat } from '../payments/chat';
import { LLM_FAILED_TITLE } from './errors';
import { chatFailureReply, paymentHeaderOf, resourceUrl } from './postLlmChat';

export const TRANSLATION_PROMPT =
  "Translate the user's text into Spanish. Answer with the translation only, without any comment.";

export const postLlmTranslate: Handler<'postLlmTranslate'> = async (ctx, deps) => {
  const paymentHeader = paymentHeaderOf(ctx.headers);
  const outcome = await paidChat(deps, {
    paymentHeader,
    resource: resourceUrl(deps.baseUrl(), '/llm/translate'),
    description: 'Translation into Spanish',
    messages: [
      { role: 'system', content: TRANSLATION_PROMPT },
      { role: 'user', content: ctx.body.text },
    ],
  });
  if (outcome.kind !== 'answered') return chatFailureReply(outcome, LLM_FAILED_TITLE.postLlmTranslate, paymentHeader);
  return {
    status: 200,
    body: { translation: outcome.response, targetLanguage: 'es', model: outcome.model },
    headers: { 'X-Payment-Response': outcome.paymentResponse },
  };
};
