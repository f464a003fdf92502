import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
beforeAll(async () => {
  t = await startTestService();
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

// A loopback target outside the allow list: refused (400) before any name is resolved or byte sent.
const simBody = { api_url: 'http://127.0.0.1:9/data', method: 'GET' };

describe('errors outside the operations', () => {
  it('an unknown path is 404 {error, details}', async () => {
    const res = await t.client.get('/nothing-here');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ code: 'not_found', error: 'Not Found', details: expect.any(String) });
  });

  it('a wrong method is 405 {error, details} with the methods of the path in Allow', async () => {
    const res = await t.client.request('DELETE', '/config');
    expect(res.status).toBe(405);
    expect(res.body).toEqual({
      code: 'method_not_allowed',
      error: 'Method Not Allowed',
      details: expect.stringContaining('DELETE'),
    });
    expect(res.headers.get('allow')).toBe('GET');
    expect((await t.client.request('GET', '/relay')).headers.get('allow')).toBe('POST');
  });

  it('malformed JSON is 400 {error, details}', async () => {
    const res = await t.client.request('POST', '/relay/sim', {
      rawBody: '{"api_url": ',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('Bad Request');
    expect(res.body.details).toMatch(/not valid JSON/);
  });

  it('a JSON string holding a call request is a string, not that request', async () => {
    const res = await t.client.request('POST', '/relay/sim', {
      rawBody: JSON.stringify(JSON.stringify(simBody)),
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: 'requestBody must be object',
    });
  });

  it('a body over 1 MiB is 413 {error, details}', async () => {
    const big = JSON.stringify({ ...simBody, headers: { filler: 'x'.repeat(1024 * 1024) } });
    const res = await t.client.request('POST', '/relay/sim', {
      rawBody: big,
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(413);
    expect(res.body.details).toContain('1048576');
  });

  it('a body just under 1 MiB is read and validated', async () => {
    const filler = 'x'.repeat(1024 * 1024 - 200);
    const res = await t.client.post('/relay/sim', { ...simBody, headers: { filler } });
    expect(res.status).not.toBe(413);
  });
});

describe('request validation', () => {
  it('lists every problem of an invalid request', async () => {
    const res = await t.client.post('/relay/sim', { method: 'FETCH', colour: 'red', network: 'gnosis' });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('Bad Request');
    const details: string = res.body.details;
    expect(details).toContain('"api_url"');
    expect(details).toMatch(/method must be one of GET, POST, PUT, DELETE, PATCH/);
    expect(details).toContain('"colour"');
    expect(details).toMatch(/network must be one of/);
  });

  it('the paid chat operations refuse an invalid body as every operation does: Bad Request, every problem in details', async () => {
    const cases: Array<[string, unknown, string]> = [
      ['/llm/chat', {}, 'requestBody is missing the required property "messages"'],
      ['/llm/chat', { messages: 5 }, 'requestBody.messages must be array'],
      [
        '/llm/chat',
        { messages: [], temperature: 3 },
        'requestBody.messages must NOT have fewer than 1 items; requestBody.temperature must be <= 2',
      ],
      ['/llm/translate', {}, 'requestBody is missing the required property "text"'],
      [
        '/llm/translate',
        { text: '', extra: 1 },
        'requestBody has an unknown property "extra"; requestBody.text must NOT have fewer than 1 characters',
      ],
    ];
    for (const [path, body, details] of cases) {
      const res = await t.client.post(path, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toEqual({ code: 'validation_failed', error: 'Bad Request', details });
    }
  });

  it('a valid request whose target the SSRF guard refuses is 400 {error, details}, nothing sent', async () => {
    const res = await t.client.post('/relay/sim', simBody);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: expect.stringContaining('127.0.0.1'),
    });
  });

  it('carries a request id on every response, and keeps a sane one the client sent', async () => {
    const mine = await t.client.get('/config', { headers: { 'x-request-id': 'client-trace-42' } });
    expect(mine.headers.get('x-request-id')).toBe('client-trace-42');
    const unsafe = await t.client.get('/config', { headers: { 'x-request-id': 'bad id\twith tab' } });
    expect(unsafe.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const first = await t.client.get('/nothing');
    const second = await t.client.get('/nothing');
    expect(first.headers.get('x-request-id')).not.toBe(second.headers.get('x-request-id'));
  });
});

describe('internal errors', () => {
  it('answer 500 with the body each operation declares, and the cause stays in the logs', async () => {
    const failing = () => Promise.reject(new Error('database password leaked in this message'));
    const { handlers } = await import('../../handlers/index');
    const { createTestAccount } = await import('../support/accounts');
    const broken = await startTestService({}, { handlers: { ...handlers, getConfig: failing, postProxy: failing } });
    try {
      const config = await broken.client.get('/config');
      expect(config.status).toBe(500);
      expect(config.body).toEqual({
        code: 'internal_error',
        error: 'Internal Server Error',
        details: expect.stringContaining(config.headers.get('x-request-id')!),
      });
      expect(config.text).not.toContain('password');
      const { key } = await createTestAccount(broken.database.handle.db);
      const proxy = await broken.client.post(
        '/proxy',
        { api_url: 'https://api.example.org/', method: 'GET' },
        { headers: { 'x-api-key': key } },
      );
      expect(proxy.status).toBe(500);
      expect(proxy.body).toEqual({
        code: 'internal_error',
        error: 'Internal Server Error',
        message: expect.any(String),
        details: expect.any(String),
      });
      expect(proxy.text).not.toContain('password');
    } finally {
      await broken.stop();
    }
  });
});
