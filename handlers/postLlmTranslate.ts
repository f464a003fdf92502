import type { Handler } from './types';
import { paidChat } from '../payments/chat';
import { chatFailureReply, paymentHeaderOf, resourceUrl } from './postLlmChat';

export const TRANSLATION_PROMPT = 'Translate the user\'s text into Spanish. Answer with the translation only, without any comment.';

export const postLlmTranslate: Handler<'postLlmTranslate'> = async (ctx, deps) => {
  const outcome = await paidChat(deps, {
    paymentHeader: paymentHeaderOf(ctx.headers),
    resource: resourceUrl(deps.baseUrl(), '/llm/translate'),
    description: 'Translation into Spanish',
    messages: [
      { role: 'system', content: TRANSLATION_PROMPT },
      { role: 'user', content: ctx.body.text },
    ],
  });
  if (outcome.kind !== 'answered') return chatFailureReply(outcome, 'Translation request failed');
  return {
    status: 200,
    body: { translation: outcome.response, targetLanguage: 'es', model: outcome.model },
    headers: { 'X-Payment-Response': outcome.paymentResponse },
  };
};
