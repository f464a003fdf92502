/**
 * The chat backend: an OpenAI-compatible chat completions endpoint set by configuration
 * (LLM_BASE_URL, LLM_API_KEY, LLM_MODEL). The model is fixed here, never taken from a request;
 * max_tokens is capped at LLM_MAX_TOKENS. Every call is bounded in time and size.
 */
import type { Config } from '../../basics/config';
import { ok, type Result } from '../../basics/result';

export const LLM_TIMEOUT_MS = 60_000;
const MAX_RESPONSE_BYTES = 2 * 1024 * 1024;

export interface ChatMessage {
  role: string;
  content: string;
}

export type ChatFailure = 'not_configured' | 'backend_error' | 'timeout' | 'invalid_response';

export type ChatResult = Result<{ response: string; model: string }, ChatFailure>;

export function llmConfigured(config: Pick<Config, 'llm'>): boolean {
  return Boolean(config.llm.baseUrl && config.llm.model);
}

export async function chatCompletion(
  config: Pick<Config, 'llm'>,
  request: { messages: ChatMessage[]; maxTokens?: number; temperature?: number },
  options: { timeoutMs?: number; fetchImpl?: typeof fetch } = {},
): Promise<ChatResult> {
  const { baseUrl, apiKey, model, maxTokens } = config.llm;
  if (!baseUrl || !model)
    return { ok: false, reason: 'not_configured', details: 'LLM_BASE_URL and LLM_MODEL are not configured' };
  const body = {
    model,
    messages: request.messages.map(({ role, content }) => ({ role, content })),
    max_tokens: Math.min(request.maxTokens ?? maxTokens, maxTokens),
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
  };
  let response: Response;
  try {
    response = await (options.fetchImpl ?? fetch)(`${baseUrl}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(options.timeoutMs ?? LLM_TIMEOUT_MS),
    });
  } catch (error) {
    const timedOut = (error as Error).name === 'TimeoutError';
    return {
      ok: false,
      reason: timedOut ? 'timeout' : 'backend_error',
      details: timedOut ? 'the chat backend did not answer in time' : 'the chat backend could not be reached',
    };
  }
  const text = await response.text();
  if (text.length > MAX_RESPONSE_BYTES)
    return { ok: false, reason: 'invalid_response', details: 'the chat backend answered too much' };
  if (!response.ok)
    return { ok: false, reason: 'backend_error', details: `the chat backend answered ${response.status}` };
  try {
    const parsed = JSON.parse(text) as { model?: unknown; choices?: Array<{ message?: { content?: unknown } }> };
    const content = parsed.choices?.[0]?.message?.content;
    if (typeof content !== 'string') throw new Error('no content');
    return ok({ response: content, model });
  } catch {
    return { ok: false, reason: 'invalid_response', details: 'the chat backend answered without a message' };
  }
}

/** Whether the backend is configured and answers (GET /models). */
export async function llmHealth(
  config: Pick<Config, 'llm'>,
  timeoutMs = 3_000,
): Promise<{ ok: boolean; details?: string }> {
  if (!llmConfigured(config)) return { ok: false, details: 'no chat backend is configured (LLM_BASE_URL, LLM_MODEL)' };
  try {
    const response = await fetch(`${config.llm.baseUrl}/models`, {
      headers: config.llm.apiKey ? { authorization: `Bearer ${config.llm.apiKey}` } : {},
      signal: AbortSignal.timeout(timeoutMs),
    });
    await response.arrayBuffer();
    return response.ok ? { ok: true } : { ok: false, details: `the chat backend answered ${response.status}` };
  } catch {
    return { ok: false, details: 'the chat backend did not answer' };
  }
}
