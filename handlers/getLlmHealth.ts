import type { Handler } from './types';
import { llmConfigured, llmHealth } from '../payments/operations/chat/llm';

export const getLlmHealth: Handler<'getLlmHealth'> = async (_ctx, { config }) => {
  const configured = llmConfigured(config);
  const health = await llmHealth(config);
  const model = config.llm.model === undefined ? {} : { model: config.llm.model };
  if (!health.ok)
    return { status: 503, body: { status: 'unavailable', configured, ...model, details: health.details } };
  return { status: 200, body: { status: 'ok', configured, ...model } };
};
