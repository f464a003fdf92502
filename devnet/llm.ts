// A small OpenAI-compatible chat completions server on 127.0.0.1 with deterministic answers, for
// the tests and the sandbox's paid chat. It records every request it receives (so tests can check
// what reached the backend, e.g. a capped max_tokens) and can be told to fail.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ChatCompletionRequest {
  model?: string;
  messages?: Array<{ role: string; content: string }>;
  max_tokens?: number;
  temperature?: number;
  [key: string]: unknown;
}

export interface LocalLlm {
  url: string;
  apiKey: string;
  model: string;
  requests: ChatCompletionRequest[];
  /** When set, every completion answers this status. */
  failWith: number | undefined;
  close(): Promise<void>;
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > 1024 * 1024) request.destroy(new Error('request too large'));
      else chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

/** The answer is a pure function of the conversation, so tests can predict it. */
export function localAnswer(messages: Array<{ role: string; content: string }>): string {
  const last = [...messages].reverse().find((message) => message.role === 'user')?.content ?? '';
  if (/spanish/i.test(messages.find((message) => message.role === 'system')?.content ?? '')) return `ES: ${last}`;
  return `Echo: ${last}`;
}

export async function startLocalLlm(options: { apiKey?: string; model?: string } = {}): Promise<LocalLlm> {
  const apiKey = options.apiKey ?? 'local-llm-key';
  const model = options.model ?? 'local-echo-1';
  const state: LocalLlm = { url: '', apiKey, model, requests: [], failWith: undefined, close: async () => {} };
  async function answer(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const send = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    if (request.method === 'GET' && request.url === '/models') {
      send(200, { object: 'list', data: [{ id: model, object: 'model' }] });
      return;
    }
    if (request.method !== 'POST' || request.url !== '/chat/completions') {
      send(404, { error: { message: 'not found' } });
      return;
    }
    if (request.headers.authorization !== `Bearer ${apiKey}`) {
      send(401, { error: { message: 'invalid api key' } });
      return;
    }
    let body: ChatCompletionRequest;
    try {
      body = JSON.parse(await readBody(request)) as ChatCompletionRequest;
    } catch {
      send(400, { error: { message: 'invalid JSON' } });
      return;
    }
    state.requests.push(body);
    if (state.failWith !== undefined) {
      send(state.failWith, { error: { message: 'the model is unavailable' } });
      return;
    }
    if (body.model !== model) {
      send(404, { error: { message: `unknown model ${body.model}` } });
      return;
    }
    const content = localAnswer(body.messages ?? []);
    const tokens = content
      .split(/\s+/)
      .slice(0, body.max_tokens ?? 1024)
      .join(' ');
    send(200, {
      id: `chatcmpl-${state.requests.length}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: tokens }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  }
  const server: Server = createServer((request, response) => {
    answer(request, response).catch((error: unknown) => {
      console.error('local LLM:', error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return state;
}
