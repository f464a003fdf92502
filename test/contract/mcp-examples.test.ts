// The examples of POST /mcp in the document are what the server does: each request example is sent
// as its summary says (the Accept and Content-Type an MCP client sends, unless the example is about
// them), and the answer is the response example of the same name, status and body; a request
// example without one is answered 202 with no body and no Content-Type. And a body the document's
// schema accepts is one the MCP transport takes: answered 200 or 202, never refused as unreadable.
// Every answer is also checked against the document by the contract client.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDocument } from '../../server/openapi';
import { createTestAccount } from '../support/accounts';
import { schemaArbitraries } from '../support/schema-arbitrary';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
let key: string;

beforeAll(async () => {
  t = await startTestService();
  ({ key } = await createTestAccount(t.database.handle.db));
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

interface Example {
  value: unknown;
}
interface Operation {
  requestBody: { content: { 'application/json': { schema: object; examples: Record<string, Example> } } };
  responses: Record<string, { content?: { 'application/json'?: { examples?: Record<string, Example> } } }>;
}

const document = loadDocument() as unknown as { paths: Record<string, { post: Operation }> };
const operation = document.paths['/mcp']!.post;
const requests = operation.requestBody.content['application/json'].examples;

/** The response examples by name, with their status. */
const responses = new Map<string, { status: number; value: unknown }>(
  Object.entries(operation.responses).flatMap(([status, response]) =>
    Object.entries(response.content?.['application/json']?.examples ?? {}).map(
      ([name, example]) => [name, { status: Number(status), value: example.value }] as const,
    ),
  ),
);

/** The headers each example is sent with, where they are not an MCP client's. */
const HEADERS: Record<string, Record<string, string>> = {
  acceptJsonOnly: { accept: 'application/json' },
  textPlain: { 'content-type': 'text/plain' },
};

/** The examples write the service's URL as the default ROUTER_URL's. */
function normalised(body: unknown): unknown {
  return JSON.parse(JSON.stringify(body).replaceAll(t.service.url, 'http://127.0.0.1:3000'));
}

function send(body: unknown, headers: Record<string, string> = {}) {
  return t.client.request('POST', '/mcp', {
    rawBody: JSON.stringify(body),
    headers: {
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
      'x-api-key': key,
      ...headers,
    },
  });
}

/** An `initialize` batched with other messages: the one body the schema accepts and the transport refuses (400, -32600, as documented). */
function initializeInBatch(body: unknown): boolean {
  return Array.isArray(body) && body.length > 1 && body.some((message) => message?.method === 'initialize');
}

describe('the examples of POST /mcp', () => {
  it('each response example answers a request example of the same name', () => {
    expect([...responses.keys()].filter((name) => !(name in requests))).toEqual([]);
    expect(Object.keys(requests).length).toBeGreaterThan(responses.size);
  });

  it.each(Object.keys(requests))('%s: the server answers as the document shows', async (name) => {
    const answer = await send(requests[name]!.value, HEADERS[name]);
    const documented = responses.get(name);
    if (documented === undefined) {
      expect(answer.status).toBe(202);
      expect(answer.text).toBe('');
      expect(answer.headers.get('content-type')).toBeNull();
      return;
    }
    expect(answer.status).toBe(documented.status);
    expect(normalised(answer.body)).toEqual(documented.value);
  });
});

describe('the JSON-RPC messages of the document', () => {
  it('are taken by the transport: a body the schema accepts is answered 200 or 202, never 400 as unreadable', async () => {
    const arbitraries = schemaArbitraries(document);
    const schema = operation.requestBody.content['application/json'].schema;
    await fc.assert(
      fc.asyncProperty(arbitraries.valid(schema), async (body) => {
        const answer = await send(body);
        if (initializeInBatch(body)) {
          expect(answer.status).toBe(400);
          expect(answer.body).toMatchObject({ error: { code: -32600 } });
        } else {
          expect([200, 202], `${answer.status} ${answer.text}`).toContain(answer.status);
        }
      }),
      { seed: 2_025_0618, numRuns: 60, endOnFailure: true },
    );
  });
});
