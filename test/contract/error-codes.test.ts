// The table of error codes: the document's ErrorCode enum, the tables of its descriptions and the
// server's ERROR_CODES say the same, and each kind of error the server sends carries its code with
// the code's status. Targets are the local peers; nothing leaves the machine.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { ERROR_CODES, type ErrorCode } from '../../handlers/errors';
import { loadDocument } from '../../server/openapi';
import { createTestAccount } from '../support/accounts';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { caip2Of } from '../../payments/basics/networkTable';
import type { PaymentRequirements } from '../../payments/x402/types';
import type { ContractResponse } from '../support/contract';
import { holdRequest } from '../support/held-request';
import { peersEnv, startLlmService, startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const document = loadDocument() as unknown as {
  info: { description: string };
  components: {
    schemas: Record<
      string,
      { enum?: string[]; description?: string; required?: string[]; properties?: Record<string, { $ref?: string }> }
    >;
  };
};
const errorCode = document.components.schemas.ErrorCode!;

/** The rows `| \`code\` | status | meaning |` of a markdown table, as code -> status. */
function tableRows(markdown: string): Map<string, number> {
  const rows = new Map<string, number>();
  for (const match of markdown.matchAll(/^\s*\| `([a-z_]+)` \| (\d{3}) \|/gm)) {
    expect(rows.has(match[1]!), `${match[1]} listed twice`).toBe(false);
    rows.set(match[1]!, Number(match[2]));
  }
  return rows;
}

const tableStatuses = new Map(Object.entries(ERROR_CODES).map(([code, entry]) => [code, entry.status]));

describe('one table of error codes', () => {
  it('the enum of the document and the table of the server hold the same codes', () => {
    expect([...errorCode.enum!].sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('the tables of the document give every code the status the server sends it with', () => {
    expect(tableRows(errorCode.description!)).toEqual(tableStatuses);
    expect(tableRows(document.info.description)).toEqual(tableStatuses);
  });

  it('every error body of the document requires a code from the enum', () => {
    // NotImplemented is in no operation while every operation has its handler, so not in the bundle.
    const bodies = [
      'ErrorBody',
      'InsufficientCredits',
      'InternalError',
      'ProxyBadGateway',
      'RelayBadGateway',
      'SpendLimitExceeded',
      'TooManyRequests',
      'ChatError',
      'TranslateError',
      'PaymentRequired',
    ];
    for (const name of bodies) {
      const schema = document.components.schemas[name]!;
      expect(schema.required, name).toContain('code');
      expect(schema.properties?.code, name).toEqual({ $ref: '#/components/schemas/ErrorCode' });
    }
  });
});

let peers: Peers;
let t: TestService;
let closedPort: number;

async function unusedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'] });
  closedPort = await unusedPort();
  // No LLM backend: the chat operations answer 503.
  t = await startProxyService(peers, {
    CAP_WEBHOOKS: '1',
    SSRF_ALLOW_HOSTS: peersEnv(peers, [`127.0.0.1:${closedPort}`]).SSRF_ALLOW_HOSTS!,
  });
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const decodeHeader = (value: string | null): any => JSON.parse(Buffer.from(value!, 'base64').toString('utf8'));

function expectCode(response: ContractResponse, code: ErrorCode): void {
  expect(response.body?.code, response.text.slice(0, 300)).toBe(code);
  expect(response.status).toBe(ERROR_CODES[code].status);
}

describe('each kind of error carries its code', () => {
  const paidUrl = () => peers.targets['base-sepolia']!.routes.paid.url;

  it('400 validation_failed: an invalid request', async () => {
    expectCode(await t.client.post('/relay/sim', { method: 'FETCH' }), 'validation_failed');
  });

  it('401 unauthorized: /proxy without a key', async () => {
    expectCode(await t.client.post('/proxy', { api_url: paidUrl(), method: 'GET' }), 'unauthorized');
  });

  it('402 payment_required: /relay to a paid target without a payment; each form names the header of its version', async () => {
    const res = await t.client.post('/relay', { api_url: paidUrl(), method: 'GET' });
    expectCode(res, 'payment_required');
    expect(res.body).toMatchObject({ x402Version: 1, error: 'X-PAYMENT header is required' });
    expect(decodeHeader(res.headers.get('payment-required'))).toMatchObject({
      x402Version: 2,
      error: 'PAYMENT-SIGNATURE header is required',
    });
  });

  it('402 insufficient_credits: /proxy with too few credits', async () => {
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1n });
    const res = await t.client.post('/proxy', { api_url: paidUrl(), method: 'GET' }, { headers: { 'x-api-key': key } });
    expectCode(res, 'insufficient_credits');
    expect(res.body.error).toBe('Insufficient credits');
  });

  it('404 not_found and 405 method_not_allowed', async () => {
    expectCode(await t.client.get('/nothing-here'), 'not_found');
    expectCode(await t.client.get('/webhooks/6f1c1f4e-0000-4000-8000-000000000000'), 'not_found');
    expectCode(await t.client.request('DELETE', '/config'), 'method_not_allowed');
  });

  it('413 payload_too_large: a body over 1 MiB', async () => {
    const big = JSON.stringify({ api_url: paidUrl(), method: 'GET', headers: { filler: 'x'.repeat(1024 * 1024) } });
    expectCode(
      await t.client.request('POST', '/relay/sim', { rawBody: big, headers: { 'content-type': 'application/json' } }),
      'payload_too_large',
    );
  });

  it('429 capacity_exceeded: a route at its cap', async () => {
    const held = holdRequest(t.service.url, 'GET', '/webhooks/6f1c1f4e-0000-4000-8000-000000000000', {});
    try {
      // Ask only once the held request has the one slot, or ours could take it first.
      const deadline = Date.now() + 5_000;
      while ((await t.client.get('/metrics/rate-limits')).body.webhooks.active !== 1 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const res = await t.client.get('/webhooks/6f1c1f4e-0000-4000-8000-000000000000');
      expectCode(res, 'capacity_exceeded');
      expect(res.body.error).toBe('Too Many Requests');
    } finally {
      await held.release();
    }
  });

  it('429 spend_limit_exceeded: a key over its daily cap, with the title of its limit', async () => {
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n, dailyCapCredits: 1n });
    const res = await t.client.post('/proxy', { api_url: paidUrl(), method: 'GET' }, { headers: { 'x-api-key': key } });
    expectCode(res, 'spend_limit_exceeded');
    expect(res.body.error).toBe('Daily API key spending cap exceeded');
  });

  it('431 header_fields_too_large: a header section Node refuses', async () => {
    const { port } = new URL(t.service.url);
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = net.connect({ host: '127.0.0.1', port: Number(port) });
      let received = '';
      socket.on('data', (chunk) => (received += chunk.toString('latin1')));
      socket.on('error', reject);
      socket.on('close', () => resolve(received));
      socket.write(`GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 431 /);
    expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))).toMatchObject({
      code: 'header_fields_too_large',
      error: 'Request Header Fields Too Large',
    });
  });

  it('502 target_unreachable: /proxy to a target nobody listens on', async () => {
    const { key } = await createTestAccount(t.database.handle.db, { credits: 100n });
    const res = await t.client.post(
      '/proxy',
      { api_url: `http://127.0.0.1:${closedPort}/`, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expectCode(res, 'target_unreachable');
    expect(res.body.upstreamStatus).toBeUndefined();
  });

  it('503 llm_unavailable: chat without a model backend', async () => {
    expectCode(await t.client.post('/llm/chat', { messages: [{ role: 'user', content: 'hello' }] }), 'llm_unavailable');
    expectCode(await t.client.post('/llm/translate', { text: 'hello' }), 'llm_unavailable');
  });
});

describe('a refused payment carries the code of its cause, on /relay and the paid chat, in both versions', () => {
  const NETWORK = 'base-sepolia' as const;
  let llm: LocalLlm;
  let paid: TestService;
  const relayBody = () => ({ api_url: peers.targets[NETWORK]!.routes.paid.url, method: 'GET' });
  const chatBody = { messages: [{ role: 'user', content: 'refused' }] };
  const base64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64');

  beforeAll(async () => {
    llm = await startLocalLlm();
    paid = await startLlmService(peers, llm);
  });
  afterAll(async () => {
    await ifStarted(paid)?.stop();
    await ifStarted(llm)?.close();
  });

  /** A fresh funded payer, our 402 for the call in both forms, and a signer of payments for its offer. */
  async function payer(path: string, body: unknown) {
    const privateKey = generatePrivateKey();
    const address = privateKeyToAccount(privateKey).address;
    await peers.mint(NETWORK, address, 1_000_000n);
    const first = await paid.client.post(path, body);
    expectCode(first, 'payment_required');
    const offer = (first.body.accepts as PaymentRequirements[]).find((entry) => entry.network === NETWORK)!;
    const required = decodeHeader(first.headers.get('payment-required'));
    expect(required.error).toBe('PAYMENT-SIGNATURE header is required');
    const accepted = required.accepts.find((entry: { network: string }) => entry.network === caip2Of(NETWORK));
    const sign = (overrides: Parameters<Peers['signEvmPayment']>[1] = {}) =>
      peers.signEvmPayment(offer, overrides, privateKey);
    const v2 = async (overrides: Parameters<Peers['signEvmPayment']>[1] = {}, entry: unknown = accepted) =>
      base64({
        x402Version: 2,
        resource: required.resource,
        accepted: entry,
        payload: (await sign(overrides)).payment.payload,
      });
    return { address, offer, accepted, sign, v2, balance: () => peers.usdcBalance(NETWORK, address) };
  }

  const now = () => BigInt(Math.floor(Date.now() / 1000));

  /** The refusal: its code and status, a 402 with the offers of now in both forms, the cause in `error` too, and nothing moved. */
  async function expectRefused(
    path: string,
    body: unknown,
    headers: Record<string, string>,
    code: ErrorCode,
    reason: string,
    balance: () => Promise<bigint>,
  ) {
    const before = await balance();
    const res = await paid.client.post(path, body, { headers });
    expectCode(res, code);
    expect(res.status).toBe(402);
    expect(res.body.accepts.length).toBeGreaterThan(0);
    expect(res.body.error).toMatch(new RegExp(`^${reason}: `));
    expect(decodeHeader(res.headers.get('payment-required'))).toMatchObject({
      x402Version: 2,
      error: res.body.error,
      accepts: expect.arrayContaining([expect.objectContaining({ network: caip2Of(NETWORK) })]),
    });
    expect(await balance()).toBe(before);
  }

  for (const path of ['/relay', '/llm/chat']) {
    const body = () => (path === '/relay' ? relayBody() : chatBody);

    it(`${path}: offer_mismatch, a version 2 \`accepted\` that is none of our offers`, async () => {
      const p = await payer(path, body());
      const header = await p.v2({}, { ...p.accepted, amount: (BigInt(p.accepted.amount) - 1n).toString() });
      await expectRefused(path, body(), { 'PAYMENT-SIGNATURE': header }, 'offer_mismatch', 'offer_mismatch', p.balance);
    });

    it(`${path}: amount_mismatch, another amount than asked, in either version`, async () => {
      const p = await payer(path, body());
      const value = BigInt(p.offer.maxAmountRequired) - 1n;
      const v1 = { 'X-PAYMENT': (await p.sign({ value })).header };
      await expectRefused(path, body(), v1, 'amount_mismatch', 'wrong_amount', p.balance);
      const v2 = { 'PAYMENT-SIGNATURE': await p.v2({ value }) };
      await expectRefused(path, body(), v2, 'amount_mismatch', 'wrong_amount', p.balance);
    });

    it(`${path}: network_mismatch, a network we did not offer`, async () => {
      const p = await payer(path, body());
      const header = { 'X-PAYMENT': (await p.sign({ network: 'base' })).header };
      await expectRefused(path, body(), header, 'network_mismatch', 'network_not_offered', p.balance);
    });

    it(`${path}: payment_expired, outside its validity window, in either version`, async () => {
      const p = await payer(path, body());
      const expired = { validAfter: now() - 600n, validBefore: now() - 1n };
      await expectRefused(
        path,
        body(),
        { 'X-PAYMENT': (await p.sign(expired)).header },
        'payment_expired',
        'expired',
        p.balance,
      );
      await expectRefused(
        path,
        body(),
        { 'PAYMENT-SIGNATURE': await p.v2(expired) },
        'payment_expired',
        'expired',
        p.balance,
      );
      const notYet = { 'X-PAYMENT': (await p.sign({ validAfter: now() + 600n })).header };
      await expectRefused(path, body(), notYet, 'payment_expired', 'not_yet_valid', p.balance);
    });

    it(`${path}: payment_reused (400), a payment already taken, sent again in the other header`, async () => {
      const p = await payer(path, body());
      const signed = await p.sign();
      const first = await paid.client.post(path, body(), { headers: { 'X-PAYMENT': signed.header } });
      expect(first.status).toBe(200);
      const after = await p.balance();
      const again = base64({
        x402Version: 2,
        resource: decodeHeader((await paid.client.post(path, body())).headers.get('payment-required')).resource,
        accepted: p.accepted,
        payload: signed.payment.payload,
      });
      // On /relay the same request would get the first call's answer: another request is refused.
      const otherBody = path === '/relay' ? { ...relayBody(), headers: { 'x-other': 'request' } } : chatBody;
      const res = await paid.client.post(path, otherBody, { headers: { 'PAYMENT-SIGNATURE': again } });
      expectCode(res, 'payment_reused');
      expect(res.body).toEqual({
        code: 'payment_reused',
        error: 'Bad Request',
        details: expect.stringMatching(/already used/),
      });
      expect(await p.balance()).toBe(after);
    });
  }

  it('a payment refused for another cause stays payment_invalid, its cause in `error`', async () => {
    const p = await payer('/relay', relayBody());
    const header = { 'X-PAYMENT': (await p.sign({ domain: { chainId: 1 } })).header };
    await expectRefused('/relay', relayBody(), header, 'payment_invalid', 'invalid_signature', p.balance);
  });
});

describe('500 internal_error', () => {
  it('an unexpected exception answers the 500 each operation declares, with the code', async () => {
    const failing = () => Promise.reject(new Error('unexpected'));
    const { handlers } = await import('../../handlers/index');
    const broken = await startProxyService(
      peers,
      {},
      { handlers: { ...handlers, getConfig: failing, postProxy: failing, postLlmTranslate: failing } },
    );
    try {
      const config = await broken.client.get('/config');
      expectCode(config, 'internal_error');
      expect(config.body.error).toBe('Internal Server Error');
      const { key } = await createTestAccount(broken.database.handle.db);
      const proxy = await broken.client.post(
        '/proxy',
        { api_url: 'https://api.example.org/', method: 'GET' },
        { headers: { 'x-api-key': key } },
      );
      expectCode(proxy, 'internal_error');
      expect(proxy.body).toMatchObject({
        error: 'Internal Server Error',
        message: expect.any(String),
        details: expect.any(String),
      });
      const translate = await broken.client.post('/llm/translate', { text: 'hello' });
      expectCode(translate, 'internal_error');
      expect(translate.body).toEqual({
        code: 'internal_error',
        error: 'Translation request failed',
        message: expect.stringContaining(translate.headers.get('x-request-id')!),
      });
    } finally {
      await broken.stop();
    }
  });
});
