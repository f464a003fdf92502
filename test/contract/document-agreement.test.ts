// The document and the server state the same rules: what one refuses, the other refuses, and every
// answer the server gives outside an operation (405, parser errors) is one the document describes.
import { connect } from 'node:net';
import { PassThrough } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { WALLET_ADDRESS } from '../../handlers/getRelayLimits';
import {
  BASIC_AUTH_USERNAME,
  BODY_FIELDS,
  buildTargetRequest,
  COOKIE_VALUE,
  HEADER_VALUE,
  TOKEN,
} from '../../payments/basics/http/request';
import { answerClientError } from '../../server/service';
import { contractBackend } from '../support/contract';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const HTTP_METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'] as const;
const CALL_OPERATIONS = [
  { operationId: 'postRelay', path: '/relay' },
  { operationId: 'postProxy', path: '/proxy' },
  { operationId: 'postProxySim', path: '/proxy/sim' },
] as const;
const BASE_CALL = { api_url: 'https://target.example/x', method: 'POST' } as const;
const EVM_EXAMPLE = `0x${'1'.repeat(40)}`;

let t: TestService;
let document: Record<string, any>;

beforeAll(async () => {
  // A paid LLM operation needs a backend and a wallet to answer 402; neither is contacted for it
  // (port 9 of 127.0.0.1 refuses connections if anything tried).
  t = await startTestService({
    NETWORKS: 'base-sepolia',
    EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
    RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9',
    LLM_BASE_URL: 'http://127.0.0.1:9/v1',
    LLM_MODEL: 'document-agreement-model',
    RUN_WORKER: 'false',
  });
  document = t.service.deps.document as Record<string, any>;
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

/** Whether the server's own validator (the document through openapi-backend's Ajv) accepts a call body. */
async function documentAccepts(operation: (typeof CALL_OPERATIONS)[number], body: unknown): Promise<boolean> {
  const api = await contractBackend();
  const result = api.validateRequest(
    // /proxy and /proxy/sim declare x-api-key as a required header parameter; its value is not the point here.
    {
      method: 'post',
      path: operation.path,
      body,
      headers: { 'x-api-key': 'prs_Ab3dEf9hJk_0123456789abcdefghijklmnopqrstuv' },
      query: {},
    },
    operation.operationId,
  );
  return result.valid;
}

function serverAccepts(call: Record<string, unknown>): boolean {
  return buildTargetRequest({ ...BASE_CALL, ...call }).ok;
}

function examplePath(template: string): string {
  return template.replace('{address}', EVM_EXAMPLE).replace('{id}', '3f1c2a8e-6f4b-4d7a-9d4e-2b8a1c0e5f71');
}

describe('405 on every path', () => {
  it('answers a method a path does not support with Allow and {error, details}, as every operation of the path documents', async () => {
    const api = await contractBackend();
    for (const [template, item] of Object.entries<Record<string, any>>(document.paths)) {
      const supported = HTTP_METHODS.filter((method) => item[method.toLowerCase()] !== undefined);
      const operationIds = supported.map((method) => item[method.toLowerCase()].operationId as string);
      for (const method of HTTP_METHODS.filter((m) => !supported.includes(m))) {
        const res = await t.client.request(method, examplePath(template), method === 'GET' ? {} : { body: {} });
        expect(res.status, `${method} ${template}`).toBe(405);
        expect(res.body).toEqual({
          code: 'method_not_allowed',
          error: 'Method Not Allowed',
          details: expect.stringContaining(method),
        });
        expect(res.headers.get('allow')?.split(', ').sort(), `Allow of ${template}`).toEqual([...supported].sort());
        const headers = Object.fromEntries(res.headers.entries());
        for (const operationId of operationIds) {
          expect(api.validateResponse(res.body, operationId, 405).errors ?? null, `${operationId} 405 body`).toBeNull();
          expect(
            api.validateResponseHeaders(headers, operationId, { statusCode: 405 }).errors ?? null,
            `${operationId} 405 headers`,
          ).toBeNull();
        }
      }
    }
  });

  it('documents Allow as a required header of the shared 405', () => {
    const shared = document.components.responses.MethodNotAllowed;
    expect(shared.headers.Allow).toEqual({ $ref: '#/components/headers/Allow' });
    expect(document.components.headers.Allow.required).toBe(true);
    for (const item of Object.values<Record<string, any>>(document.paths)) {
      for (const operation of Object.values<any>(item))
        expect(operation.responses['405'], operation.operationId).toBeDefined();
    }
  });
});

describe('json, data, body and payload are mutually exclusive', () => {
  const values: Record<string, unknown> = { json: { a: 1 }, data: 'a=1', body: 'raw', payload: { b: 2 } };
  const subsets = Array.from({ length: 1 << BODY_FIELDS.length }, (_, mask) =>
    BODY_FIELDS.filter((_, bit) => mask & (1 << bit)),
  );

  it.each(CALL_OPERATIONS)(
    '$operationId: the schema refuses exactly the combinations the server refuses',
    async (operation) => {
      for (const fields of subsets) {
        const call = Object.fromEntries(fields.map((field) => [field, values[field]]));
        const server = serverAccepts(call);
        expect(server, fields.join('+')).toBe(fields.length <= 1);
        expect(
          await documentAccepts(operation, { ...BASE_CALL, ...call }),
          `${operation.operationId} ${fields.join('+') || 'no body field'}`,
        ).toBe(server);
      }
    },
  );

  it('a relay simulation has a single body field, so nothing to exclude', () => {
    const properties = Object.keys(document.components.schemas.RelaySimRequest.properties);
    expect(properties.filter((name) => (BODY_FIELDS as readonly string[]).includes(name))).toEqual(['payload']);
  });

  it('a request giving two is a 400 naming both, listed with the other problems of the request', async () => {
    const res = await t.client.post('/relay', { ...BASE_CALL, json: { a: 1 }, data: 'x', colour: 'red' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: expect.stringContaining('json and data'),
    });
    expect(res.body.details).toContain('"colour"');
  });
});

describe('headers, cookies, auth, params and data: the schema holds the server rules', () => {
  // Every character up to U+02FF, a few beyond, and the astral plane.
  const characters = [
    ...Array.from({ length: 0x300 }, (_, code) => String.fromCharCode(code)),
    '\u2028',
    '\u2603',
    '\ufeff',
    '\u{1f600}',
  ];

  it('the patterns are the expressions the server checks with', () => {
    const schemas = document.components.schemas;
    expect(schemas.CallHeaders.propertyNames.pattern).toBe(TOKEN.source);
    expect(schemas.CallHeaders.additionalProperties.pattern).toBe(HEADER_VALUE.source);
    expect(schemas.CallCookies.propertyNames.pattern).toBe(TOKEN.source);
    expect(schemas.CallCookies.additionalProperties.pattern).toBe(COOKIE_VALUE.source);
    expect(schemas.BasicAuth.properties.username.pattern).toBe(BASIC_AUTH_USERNAME.source);
    expect(document.components.parameters.WalletAddress.schema.pattern).toBe(WALLET_ADDRESS.source);
  });

  it('header names and values: every character is accepted or refused by both', async () => {
    const operation = CALL_OPERATIONS[0];
    const disagreements: string[] = [];
    const cases: Array<Record<string, string>> = [{ '': 'empty name' }];
    for (const character of characters) cases.push({ [`X-${character}`]: 'v' }, { 'X-Test': `a${character}b` });
    for (const headers of cases) {
      const server = serverAccepts({ headers });
      if ((await documentAccepts(operation, { ...BASE_CALL, headers })) !== server)
        disagreements.push(`${JSON.stringify(headers)} (server ${server})`);
    }
    expect(disagreements).toEqual([]);
    expect(serverAccepts({ headers: { 'X-Test': 'a\r\nInjected: 1' } })).toBe(false);
  });

  it('cookie names and values: every character is accepted or refused by both', async () => {
    const operation = CALL_OPERATIONS[0];
    const disagreements: string[] = [];
    const cases: Array<Record<string, string>> = [{ '': 'empty name' }];
    for (const character of characters) cases.push({ [`c${character}`]: 'v' }, { session: `a${character}b` });
    for (const cookies of cases) {
      const server = serverAccepts({ cookies });
      if ((await documentAccepts(operation, { ...BASE_CALL, cookies })) !== server)
        disagreements.push(`${JSON.stringify(cookies)} (server ${server})`);
    }
    expect(disagreements).toEqual([]);
    expect(serverAccepts({ cookies: { session: 'a;b' } })).toBe(false);
  });

  it('auth, params and data: the same verdict from both', async () => {
    const table: Array<[string, Record<string, unknown>, boolean]> = [
      ['username with a colon', { auth: { username: 'a:b', password: 'p' } }, false],
      ['plain credentials', { auth: { username: 'ab', password: 'p:q' } }, true],
      ['empty user name', { auth: { username: '', password: '' } }, true],
      ['scalar params', { params: { city: 'Lisbon', days: 3, hot: true } }, true],
      ['a list repeats the key', { params: { tag: ['a', 1, false] } }, true],
      ['null leaves the key out', { params: { gone: null } }, true],
      ['nested params', { params: { deep: { a: 1 } } }, false],
      ['a list of lists', { params: { tag: [['a']] } }, false],
      ['null in a list', { params: { tag: [null] } }, false],
      ['form data', { data: { a: 'x', b: [1, 2], c: null } }, true],
      ['nested form data', { data: { a: { b: 1 } } }, false],
      ['text data', { data: 'a=1&b=2' }, true],
    ];
    for (const operation of CALL_OPERATIONS) {
      for (const [name, call, accepted] of table) {
        expect(serverAccepts(call), `server: ${name}`).toBe(accepted);
        expect(await documentAccepts(operation, { ...BASE_CALL, ...call }), `${operation.operationId}: ${name}`).toBe(
          accepted,
        );
      }
    }
  });

  it('a bad header is a 400 naming it and why, listed with the other problems of the request', async () => {
    const res = await t.client.post('/relay', {
      ...BASE_CALL,
      headers: { 'bad name': 'x', 'X-Test': 'a\r\nb' },
      colour: 'red',
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('Bad Request');
    const details: string = res.body.details;
    expect(details).toContain('"bad name"');
    expect(details).toMatch(/HTTP token/);
    expect(details).toMatch(/headers\.X-Test must not contain CR, LF/);
    expect(details).toContain('"colour"');
  });
});

describe('wallet addresses of /relay/limits/{address}', () => {
  const table: Array<[string, boolean]> = [
    [EVM_EXAMPLE, true],
    ['0xAbCdEf0123456789abcdef0123456789ABCDEF01', true],
    [`0x${'1'.repeat(39)}`, false],
    [`0x${'1'.repeat(41)}`, false],
    [`0X${'1'.repeat(40)}`, false],
    [`0x${'g'.repeat(40)}`, false],
    ['EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v', true],
    ['11111111111111111111111111111111', true],
    ['1111111111111111111111111111111', false],
    ['z'.repeat(44), true],
    ['z'.repeat(45), false],
    ['EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10', false],
    ['EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1O', false],
    ['EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1I', false],
    ['EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1l', false],
    ['not-an-address', false],
  ];

  it('the schema and the server accept the same addresses', async () => {
    const api = await contractBackend();
    for (const [address, accepted] of table) {
      const answered = await t.client.get(`/relay/limits/${encodeURIComponent(address)}`);
      expect(answered.status === 200, `server: ${address}`).toBe(accepted);
      const result = api.validateRequest(
        { method: 'get', path: `/relay/limits/${address}`, headers: {}, query: {} },
        'getRelayLimits',
      );
      expect(result.valid, `document: ${address}`).toBe(accepted);
    }
  });

  it('an address the pattern accepts is answered; one it refuses is a 400 naming it with the other problems', async () => {
    const answered = await t.client.get(`/relay/limits/${'z'.repeat(44)}`);
    expect(answered.status).toBe(200);
    const refused = await t.client.get('/relay/limits/not-an-address?colour=red');
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: expect.stringMatching(/address must be an EVM address .* or a Solana address/),
    });
    expect(refused.body.details).toContain('"colour"');
  });
});

describe('the 402 of the paid LLM operations', () => {
  it.each([
    ['/llm/chat', { messages: [{ role: 'user', content: 'hi' }] }],
    ['/llm/translate', { text: 'Good morning' }],
  ])('%s carries its requirements in the x-payment header too: base64 of the 402 body', async (path, body) => {
    const res = await t.client.post(path, body);
    expect(res.status).toBe(402);
    expect(res.body.accepts.length).toBeGreaterThan(0);
    const header = res.headers.get('x-payment');
    expect(header).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
    const decoded = JSON.parse(Buffer.from(header!, 'base64').toString('utf8'));
    expect(decoded).toEqual(res.body);
    expect(decoded.accepts).toEqual(res.body.accepts);
  });
});

/** One raw HTTP/1.1 exchange with the service: what Node's parser refuses never reaches fetch. */
function rawExchange(
  request: string | Buffer,
  socketOptions: { followUp?: (first: string) => string } = {},
): Promise<string[]> {
  const { port } = new URL(t.service.url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: Number(port) });
    const answers: string[] = [];
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString('latin1');
      const { followUp } = socketOptions;
      // A keep-alive exchange: once the first answer is complete, send the second request.
      if (followUp && answers.length === 0) {
        const end = received.indexOf('\r\n\r\n');
        const length = Number(/content-length: (\d+)/i.exec(received)?.[1] ?? NaN);
        if (end >= 0 && received.length >= end + 4 + length) {
          answers.push(received.slice(0, end + 4 + length));
          received = received.slice(end + 4 + length);
          socket.write(followUp(answers[0]!));
        }
      }
    });
    socket.on('error', reject);
    socket.on('close', () => resolve([...answers, received]));
    socket.write(request);
  });
}

function parseAnswer(raw: string) {
  const end = raw.indexOf('\r\n\r\n');
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const text = raw.slice(end + 4);
  return { status: Number(statusLine!.split(' ')[1]), statusLine, headers, text, body: JSON.parse(text) };
}

async function expectDocumented(answer: ReturnType<typeof parseAnswer>, operationId: string) {
  const api = await contractBackend();
  expect(answer.headers['content-type']).toMatch(/^application\/json/);
  expect(answer.headers.connection).toBe('close');
  expect(Number(answer.headers['content-length'])).toBe(Buffer.byteLength(answer.text, 'latin1'));
  expect(api.validateResponse(answer.body, operationId, answer.status).errors ?? null).toBeNull();
  expect(
    api.validateResponseHeaders(answer.headers, operationId, { statusCode: answer.status }).errors ?? null,
  ).toBeNull();
}

describe('requests Node refuses before any operation', () => {
  it('headers over the limit: 431 {error, details} JSON, as documented, and the connection is closed', async () => {
    const [raw] = await rawExchange(
      `GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    const answer = parseAnswer(raw!);
    expect(answer.statusLine).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(answer.body).toEqual({
      code: 'header_fields_too_large',
      error: 'Request Header Fields Too Large',
      details: expect.any(String),
    });
    await expectDocumented(answer, 'getConfig');
  });

  it('invalid header bytes: 400 {error, details} JSON, as documented', async () => {
    const [raw] = await rawExchange('GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\u0000b\r\n\r\n');
    const answer = parseAnswer(raw!);
    expect(answer.status).toBe(400);
    expect(answer.body).toEqual({
      code: 'malformed_request',
      error: 'Bad Request',
      details: expect.stringContaining('not valid HTTP/1.1'),
    });
    await expectDocumented(answer, 'getConfig');
  });

  it('a bad request after a completed one on a kept-alive connection gets the JSON answer as well', async () => {
    const [first, second] = await rawExchange('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', {
      followUp: () => 'GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\u0000b\r\n\r\n',
    });
    expect(parseAnswer(first!).status).toBe(200);
    const answer = parseAnswer(second!);
    expect(answer.status).toBe(400);
    expect(answer.body.error).toBe('Bad Request');
  });

  describe('sockets that cannot take an answer are only destroyed', () => {
    const log = pino({ level: 'silent' });
    function fakeSocket(extra: Record<string, unknown> = {}) {
      const socket = Object.assign(new PassThrough(), extra);
      const end = vi.spyOn(socket, 'end');
      const destroy = vi.spyOn(socket, 'destroy');
      return { socket, end, destroy };
    }

    it('a reset connection', () => {
      const { socket, end, destroy } = fakeSocket();
      answerClientError(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), socket, log);
      expect(end).not.toHaveBeenCalled();
      expect(destroy).toHaveBeenCalled();
    });

    it('a socket no longer writable', () => {
      const { socket, end, destroy } = fakeSocket();
      socket.destroy();
      destroy.mockClear();
      answerClientError(Object.assign(new Error('Parse Error'), { code: 'HPE_HEADER_OVERFLOW' }), socket, log);
      expect(end).not.toHaveBeenCalled();
    });

    it('a connection whose previous response is under way', () => {
      const { socket, end, destroy } = fakeSocket({ _httpMessage: { headersSent: true } });
      answerClientError(Object.assign(new Error('Parse Error'), { code: 'HPE_INVALID_HEADER_TOKEN' }), socket, log);
      expect(end).not.toHaveBeenCalled();
      expect(destroy).toHaveBeenCalled();
    });

    it('a writable socket gets a complete response', () => {
      const { socket, end } = fakeSocket();
      answerClientError(Object.assign(new Error('Parse Error'), { code: 'HPE_HEADER_OVERFLOW' }), socket, log);
      expect(end).toHaveBeenCalledWith(
        expect.stringMatching(
          /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n[\s\S]*connection: close\r\n\r\n\{"code":"header_fields_too_large","error"/,
        ),
      );
    });
  });
});
