// The error examples of the document are what the server sends: each documented example of an
// error answer is produced here by the request it illustrates, and the answer's body must equal it.
// An example this file cannot produce is listed with the reason, so a new example is never left unchecked.
// The request examples of /relay are sent as they are (the target's origin aside) and must reach the
// target as they describe it; the 402 example of /relay is the answer to the first of them.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDocument } from '../../server/openapi';
import { createTestAccount } from '../support/accounts';
import type { ContractResponse } from '../support/contract';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
let closed: number;

async function unusedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

beforeAll(async () => {
  closed = await unusedPort();
  // No chat backend; a loopback port nobody listens on is allowed, as the unreachable target.
  t = await startTestService({ SSRF_ALLOW_HOSTS: `127.0.0.1:${closed}` });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

interface DocumentedExample {
  /** `METHOD /path status`, and the example's name when the answer has several. */
  id: string;
  value: unknown;
}

type Doc = {
  paths: Record<string, Record<string, { responses?: Record<string, any> }>>;
  components: { responses: Record<string, any> };
};

/** Every example of an error body of ours (an object with `code`) in the responses of the document. */
function errorExamples(): DocumentedExample[] {
  const document = loadDocument() as unknown as Doc;
  const found: DocumentedExample[] = [];
  for (const [route, item] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      for (const [status, declared] of Object.entries(operation.responses ?? {})) {
        // A component response's example is one example, whichever operations use it.
        const component = declared.$ref ? String(declared.$ref).split('/').pop()! : undefined;
        const response = component ? document.components.responses[component] : declared;
        const media = response.content?.['application/json'];
        if (!media) continue;
        const id = component ?? `${method.toUpperCase()} ${route} ${status}`;
        if (found.some((example) => example.id === id)) continue;
        const values: Array<[string, unknown]> = [];
        if (media.example !== undefined) values.push([id, media.example]);
        for (const [name, example] of Object.entries<any>(media.examples ?? {}))
          values.push([`${id} ${name}`, example.value]);
        for (const [exampleId, value] of values) {
          if (typeof value === 'object' && value !== null && 'code' in value) found.push({ id: exampleId, value });
        }
      }
    }
  }
  return found;
}

const WEBHOOK_ID = '3f1c2a8e-6f4b-4d7a-9d4e-2b8a1c0e5f71';

/** The request each example illustrates, and the answer's body as the example shows it. */
const PRODUCERS: Record<string, () => Promise<ContractResponse>> = {
  'GET /webhooks/{id} 400': () => t.client.get('/webhooks/not-a-uuid'),
  'GET /webhooks/{id} 404': () => t.client.get(`/webhooks/${WEBHOOK_ID}`),
  'GET /relay/limits/{address} 400': () => t.client.get('/relay/limits/not-an-address'),
  'POST /relay 400 validation': () =>
    t.client.post('/relay', { api_url: 'https://api.example.org/weather', method: 'POST', json: {}, data: 'x' }),
  'POST /relay 400 missingBody': () => t.client.request('POST', '/relay'),
  'POST /llm/chat 400': () => t.client.post('/llm/chat', {}),
  LlmUnavailable: () => t.client.post('/llm/chat', { messages: [{ role: 'user', content: 'hello' }] }),
  Unauthorized: () => t.client.get('/balance'),
  'POST /proxy 401': () => t.client.post('/proxy', { api_url: 'https://api.example.org/weather', method: 'GET' }),
  MethodNotAllowed: () => t.client.request('DELETE', '/config'),
  PayloadTooLarge: () =>
    t.client.request('POST', '/relay/sim', {
      rawBody: JSON.stringify({ api_url: 'https://api.example.org/', method: 'GET', data: 'x'.repeat(1024 * 1024) }),
      headers: { 'content-type': 'application/json' },
    }),
  'POST /proxy 400': async () => {
    const { key } = await createTestAccount(t.database.handle.db);
    return t.client.post(
      '/proxy',
      { api_url: 'http://10.0.0.5/weather', method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
  },
  TargetUnreachable: () => t.client.post('/relay/sim', { api_url: `http://127.0.0.1:${closed}/`, method: 'GET' }),
};

/** Examples this file does not produce, and why; their text is the handler's, copied by hand. */
const NOT_PRODUCED: Record<string, string> = {
  'POST /relay 400 nonceReused': 'needs a settled payment (error-codes.test.ts pins payment_reused with a real one)',
  'POST /llm/chat 402': "its offers hold this server's wallets and URL (error-codes.test.ts pins code and error)",
  'POST /relay 409': 'needs a paid call held running (test/e2e/idempotency*.test.ts)',
  'POST /relay 422': 'needs a paid call kept under the key (test/e2e/idempotency.test.ts)',
  'POST /llm/chat 409': 'needs a paid chat held running under a key',
  'POST /llm/chat 422': 'needs a paid chat kept under the key (test/e2e/extensions.test.ts)',
  'POST /proxy 409': 'needs a paid call held running (test/e2e/idempotency*.test.ts)',
  'POST /proxy 422': 'needs a paid call kept under the key (test/e2e/idempotency.test.ts)',
  'POST /proxy 403':
    'names the key prefix of a policy, made at random (test/e2e/price-ceiling.test.ts pins code and details)',
  PolicyRefused:
    'names the key prefix of a policy, made at random (test/e2e/price-ceiling.test.ts pins code and details)',
  RequestHeaderFieldsTooLarge: "answered by Node's HTTP parser before any request exists (error-codes.test.ts)",
  InternalServerError: 'needs a handler that throws; its request id differs on each answer (error-codes.test.ts)',
};

/** The parts of an answer that differ between runs, as the examples write them. */
function normalised(body: unknown): unknown {
  return JSON.parse(JSON.stringify(body).replaceAll(`127.0.0.1:${closed}`, '127.0.0.1:9'));
}

describe('the error examples of the document', () => {
  const examples = errorExamples();

  it('each is produced here, or listed with the reason it is not', () => {
    const unchecked = examples
      .map((example) => example.id)
      .filter((id) => !(id in PRODUCERS) && !(id in NOT_PRODUCED) && !RELAY_PRODUCED.includes(id));
    expect(unchecked).toEqual([]);
  });

  it.each(Object.keys(PRODUCERS))('%s: the server sends the documented body', async (id) => {
    const documented = examples.find((example) => example.id === id);
    expect(documented, `${id} has no example`).toBeDefined();
    const response = await PRODUCERS[id]!();
    if (id.includes(' ')) expect(`${response.status}`).toBe(id.split(' ')[2]);
    expect(normalised(response.body)).toEqual(documented!.value);
  });
});

/** Produced by the examples of /relay below, against a service that holds a wallet. */
const RELAY_PRODUCED = ['POST /relay 402'];

describe('the examples of /relay, against a service that holds a wallet', () => {
  const SERVICE_KEY = `0x${'11'.repeat(32)}` as const;
  const EXAMPLE_TARGET = 'https://api.example.org';
  /** What the weather target asks, in micro-USDC: the 402 example's 103000 with the 3% relay fee. */
  const PRICE = '100000';
  let relay: TestService;
  let target: http.Server;
  let targetOrigin: string;
  const received: Array<{ method: string; url: string; body: string }> = [];

  beforeAll(async () => {
    // The examples' target, on loopback: /weather asks to be paid on base, anything else answers free JSON.
    target = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        received.push({ method: req.method!, url: req.url!, body: Buffer.concat(chunks).toString() });
        res.setHeader('content-type', 'application/json');
        if (!req.url!.startsWith('/weather')) {
          res.end(JSON.stringify({ translated: true }));
          return;
        }
        res.statusCode = 402;
        res.end(
          JSON.stringify({
            x402Version: 1,
            error: 'X-PAYMENT header is required',
            accepts: [
              {
                scheme: 'exact',
                network: 'base',
                maxAmountRequired: PRICE,
                resource: `${targetOrigin}/weather`,
                description: 'Weather',
                mimeType: 'application/json',
                payTo: `0x${'33'.repeat(20)}`,
                maxTimeoutSeconds: 60,
                asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
                extra: { name: 'USD Coin', version: '2' },
              },
            ],
          }),
        );
      });
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    const { port } = target.address() as AddressInfo;
    targetOrigin = `http://127.0.0.1:${port}`;
    relay = await startTestService({
      NETWORKS: 'base,base-sepolia',
      EVM_PRIVATE_KEY: SERVICE_KEY,
      // Never contacted: a first call without payment reads no chain.
      RPC_URL_BASE: 'http://127.0.0.1:9/',
      RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
      SSRF_ALLOW_HOSTS: `127.0.0.1:${port}`,
      RUN_WORKER: 'false',
    });
  });
  afterAll(async () => {
    await ifStarted(relay)?.stop();
    await new Promise((resolve) => ifStarted(target)?.close(resolve) ?? resolve(undefined));
  });

  /** The request examples of POST /relay's body, as the document gives them. */
  function requestExamples(): Array<Record<string, any>> {
    const document = loadDocument() as unknown as Doc & { components: { schemas: Record<string, any> } };
    const media = (document.paths['/relay']!.post as any).requestBody.content['application/json'];
    const schema = media.schema.$ref
      ? document.components.schemas[String(media.schema.$ref).split('/').pop()!]
      : media.schema;
    return schema.examples as Array<Record<string, any>>;
  }

  /** An answer in the document's terms: this run's service, wallet and target as the examples name them. */
  function asDocumented(body: unknown): unknown {
    const wallet = privateKeyToAccount(SERVICE_KEY).address;
    return JSON.parse(
      JSON.stringify(body)
        .replaceAll(relay.service.url, 'http://127.0.0.1:3000')
        .replaceAll(targetOrigin, EXAMPLE_TARGET)
        .replaceAll(wallet, '0x2222222222222222222222222222222222222222'),
    );
  }

  it('each request example is accepted and reaches the target as it describes; the first is answered with the 402 example', async () => {
    const examples = requestExamples();
    expect(examples.length).toBeGreaterThan(0);
    const documented402 = errorExamples().find((example) => example.id === 'POST /relay 402')!.value;
    for (const example of examples) {
      expect(String(example.api_url).startsWith(`${EXAMPLE_TARGET}/`), example.api_url).toBe(true);
      const body = { ...example, api_url: String(example.api_url).replace(EXAMPLE_TARGET, targetOrigin) };
      received.length = 0;
      const res = await relay.client.post('/relay', body);
      expect([200, 402], JSON.stringify(res.body)).toContain(res.status);

      // The target got the call the example describes.
      expect(received).toHaveLength(1);
      const url = new URL(received[0]!.url, targetOrigin);
      expect(received[0]!.method).toBe(example.method);
      expect(`${targetOrigin}${url.pathname}`).toBe(body.api_url);
      expect(Object.fromEntries(url.searchParams)).toEqual(example.params ?? {});
      if (example.json !== undefined) expect(JSON.parse(received[0]!.body)).toEqual(example.json);

      if (res.status === 402) expect(asDocumented(res.body)).toEqual(documented402);
      else expect(res.body).toEqual({ translated: true });
    }
    // The weather example is the one asked to pay.
    expect(received).toHaveLength(1);
  });
});
