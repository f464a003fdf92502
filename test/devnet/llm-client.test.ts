import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatCompletion, llmConfigured, llmHealth } from '../../payments/operations/chat/llm';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { loadConfig, type Config } from '../../payments/basics/config';

let llm: LocalLlm;
let config: Config;
beforeAll(async () => {
  llm = await startLocalLlm();
  config = loadConfig({ LLM_BASE_URL: llm.url, LLM_API_KEY: llm.apiKey, LLM_MODEL: llm.model, LLM_MAX_TOKENS: '64' });
});
afterAll(async () => {
  await llm.close();
});

describe('chat backend client', () => {
  it('sends the fixed model, caps max_tokens and passes temperature on', async () => {
    llm.requests.length = 0;
    const result = await chatCompletion(config, {
      messages: [{ role: 'user', content: 'hello there' }],
      maxTokens: 5000,
      temperature: 0.3,
    });
    expect(result).toEqual({ ok: true, value: { response: 'Echo: hello there', model: llm.model } });
    expect(llm.requests).toHaveLength(1);
    expect(llm.requests[0]).toMatchObject({ model: llm.model, max_tokens: 64, temperature: 0.3 });
    await chatCompletion(config, { messages: [{ role: 'user', content: 'x' }], maxTokens: 10 });
    expect(llm.requests[1]!.max_tokens).toBe(10);
    expect(llm.requests[1]).not.toHaveProperty('temperature');
  });

  it('reports a failing backend, a wrong key and an unreachable one as typed failures', async () => {
    llm.failWith = 503;
    expect(await chatCompletion(config, { messages: [{ role: 'user', content: 'x' }] })).toMatchObject({
      ok: false,
      reason: 'backend_error',
    });
    llm.failWith = undefined;
    const wrongKey = { llm: { ...config.llm, apiKey: 'wrong' } };
    expect(await chatCompletion(wrongKey, { messages: [{ role: 'user', content: 'x' }] })).toMatchObject({
      ok: false,
      reason: 'backend_error',
    });
    const unreachable = { llm: { ...config.llm, baseUrl: 'http://127.0.0.1:1' } };
    expect(await chatCompletion(unreachable, { messages: [{ role: 'user', content: 'x' }] })).toMatchObject({
      ok: false,
      reason: 'backend_error',
    });
    expect((await llmHealth(unreachable)).ok).toBe(false);
  });

  it('says when no backend is configured', async () => {
    const none = loadConfig({});
    expect(llmConfigured(none)).toBe(false);
    expect(await chatCompletion(none, { messages: [] })).toMatchObject({ ok: false, reason: 'not_configured' });
    expect(await llmHealth(none)).toMatchObject({ ok: false });
    expect(await llmHealth(config)).toEqual({ ok: true });
  });
});
