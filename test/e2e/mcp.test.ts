// The router's MCP server, driven by the SDK's own client, over streamable HTTP (POST /mcp of the
// service, every answer checked against the document) and over stdio (the bin, `npx
// payment-router-mcp`, as a child process with a wallet paying in x402 version 2, and again in
// version 1): the tools are listed with the document's schemas, and each is called against the
// local peers with our arguments and with HTTPayer's (its MCP server's `url`, `webhook_id`, no
// input). A paid fetch moves exactly the credits and the price; relay_fetch moves exactly the three
// legs, paid by the stdio server's wallet in the version it is set to, or over HTTP by the agent's
// own payment in either version, and its result names the client's transaction; errors of ours
// and arguments a tool does not take come back as tool errors with our code.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { x402Client, x402HTTPClient } from '@x402/core/client';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { organisationBalance } from '../../payments/accounts/credits';
import { caip2Of } from '../../payments/basics/networkTable';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { ledgerSums, startProxyService } from '../support/proxy';
import { contractFetch, relayLegBalances } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 12_345n;
/** ceil(12,345 x 1.03 / 1000) */
const CREDITS = 13n;
/** ceil(12,345 x 1.03): the relay's price */
const RELAY_TOTAL = 12_716n;
const ROOT = path.resolve(import.meta.dirname, '../..');
const TOOLS = [
  'check_limits',
  'fetch',
  'get_balance',
  'get_topup_link',
  'get_usage',
  'get_webhook_status',
  'list_payments',
  'relay_fetch',
  'search_endpoints',
  'simulate',
];
const UNKNOWN_WEBHOOK = '3f1c2a8e-6f4b-4d7a-9d4e-2b8a1c0e5f71';

let peers: Peers;
let t: TestService;
let db: Db;
const transcript: string[] = [];

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE } });
  t = await startProxyService(peers, { DISCOVERY: 'public' });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
  if (process.env.MCP_TRANSCRIPT) writeFileSync(process.env.MCP_TRANSCRIPT, transcript.join('\n'));
});

interface Called {
  isError: boolean;
  answer: { status: number; body: any; headers?: Record<string, string> };
  texts: string[];
}

async function call(client: Client, over: string, name: string, args: Record<string, unknown> = {}): Promise<Called> {
  const result = (await client.callTool({ name, arguments: args })) as {
    isError?: boolean;
    content: Array<{ type: string; text: string }>;
  };
  const texts = result.content.map((item) => item.text);
  transcript.push(
    `[${over}] ${name} ${JSON.stringify(args)}\n  -> ${result.isError ? 'error ' : ''}${texts.join(' | ').slice(0, 600)}`,
  );
  return { isError: result.isError === true, answer: JSON.parse(texts[0]!), texts };
}

const overHttp = (account: TestAccount): Transport =>
  new StreamableHTTPClientTransport(new URL(`${t.service.url}/mcp`), {
    requestInit: { headers: { 'x-api-key': account.key } },
    fetch: contractFetch(),
  });

/** The bin, as an MCP client configuration starts it, with the harness's client wallet paying in `version`. */
const overStdio =
  (version: '1' | '2') =>
  (account: TestAccount): Transport =>
    new StdioClientTransport({
      command: process.execPath,
      args: [path.join(ROOT, 'bin/payment-router-mcp.mjs')],
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        ROUTER_URL: t.service.url,
        ROUTER_API_KEY: account.key,
        ROUTER_WALLET_KEY: peers.wallets.client.evm.privateKey,
        ROUTER_X402_VERSION: version,
      },
      stderr: 'pipe',
    });

/** The relay transaction the client's payment `clientTx` opened: delivered. */
async function deliveredRelay(clientTx: string | undefined) {
  expect(clientTx).toMatch(/^0x[0-9a-f]{64}$/);
  const row = await db
    .selectFrom('relay_transactions')
    .selectAll()
    .where('client_tx_hash', '=', clientTx!)
    .executeTakeFirstOrThrow();
  expect(row.state).toBe('delivered');
  return row;
}

/** A version 2 payment of the 402 result's PAYMENT-REQUIRED, signed by @x402/core's client as the harness's client wallet. */
async function paymentSignatureFor(offer: Called): Promise<string> {
  const required = decodePaymentRequiredHeader(offer.answer.headers!['payment-required']!);
  const client = new x402Client().register(
    caip2Of(NETWORK),
    new ExactEvmScheme(privateKeyToAccount(peers.wallets.client.evm.privateKey)),
  );
  const payload = await client.createPaymentPayload(required);
  return new x402HTTPClient(client).encodePaymentSignatureHeader(payload)['PAYMENT-SIGNATURE']!;
}

describe('POST /mcp without an API key', () => {
  it('is a 401 whose WWW-Authenticate asks for x-api-key, so that an MCP client does not start OAuth', async () => {
    const client = new Client({ name: 'router-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${t.service.url}/mcp`), { fetch: contractFetch() });
    await expect(client.connect(transport)).rejects.toMatchObject({ code: 401 });
    const answer = await t.client.post(
      '/mcp',
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { headers: { accept: 'application/json, text/event-stream' } },
    );
    expect(answer.status).toBe(401);
    expect(answer.headers.get('www-authenticate')).toBe('ApiKey header="x-api-key"');
    expect(answer.body).toMatchObject({ code: 'unauthorized' });
  });
});

describe.each([
  ['streamable HTTP at /mcp', overHttp],
  ['stdio, paying in x402 version 2', overStdio('2')],
  ['stdio, paying in x402 version 1', overStdio('1')],
] as const)('the MCP server over %s', (over, transportOf) => {
  let client: Client;
  let account: TestAccount;

  beforeAll(async () => {
    account = await createTestAccount(db, { credits: 1_000n });
    client = new Client({ name: 'router-test', version: '1.0.0' });
    await client.connect(transportOf(account));
  }, 60_000);

  afterAll(async () => {
    await client.close();
  });

  it("lists HTTPayer's tool names and relay_fetch, each with a schema of the document and HTTPayer's argument names", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name).sort()).toEqual(TOOLS);
    const schemaOf = (name: string) => tools.find((tool) => tool.name === name)!.inputSchema;
    for (const name of ['fetch', 'simulate', 'relay_fetch']) {
      expect(schemaOf(name)).toMatchObject({
        type: 'object',
        additionalProperties: false,
        required: [],
        properties: {
          url: { type: 'string' },
          api_url: { type: 'string', format: 'uri' },
          method: { enum: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'], default: 'GET' },
          json: { type: 'object' },
        },
      });
    }
    expect(schemaOf('fetch').properties).toMatchObject({
      max_amount: { type: 'string', pattern: '^[1-9][0-9]{0,17}$' },
    });
    expect(Object.keys(schemaOf('relay_fetch').properties ?? {})).toEqual(
      expect.arrayContaining(['x_payment', 'payment_signature', 'network', 'max_amount']),
    );
    expect(schemaOf('get_webhook_status')).toMatchObject({
      additionalProperties: false,
      required: [],
      properties: { id: { format: 'uuid' }, webhook_id: { format: 'uuid' } },
    });
    expect(schemaOf('get_topup_link')).toMatchObject({ required: [], properties: { credits: { type: 'integer' } } });
    for (const name of ['get_balance', 'check_limits'])
      expect(schemaOf(name)).toEqual({ type: 'object', additionalProperties: false, properties: {}, required: [] });
    expect(schemaOf('get_usage')).toEqual({
      type: 'object',
      additionalProperties: false,
      required: [],
      properties: {
        from: expect.objectContaining({ type: 'string', format: 'date' }),
        to: expect.objectContaining({ type: 'string', format: 'date' }),
      },
    });
    const listPayments = schemaOf('list_payments');
    expect(Object.keys(listPayments.properties ?? {}).sort()).toEqual(
      ['cursor', 'from', 'host', 'key', 'kind', 'limit', 'status', 'to'].sort(),
    );
    expect(listPayments.properties).toMatchObject({
      limit: { type: 'integer', minimum: 1, maximum: 200 },
      status: { enum: expect.arrayContaining(['pending', 'charged', 'released', 'credited']) },
    });
    transcript.push(`[${over}] tools/list -> ${tools.map((tool) => tool.name).join(', ')}`);
  });

  it("HTTPayer's calls: simulate and fetch with `url` alone pay as GET, an object `body` goes as JSON, get_webhook_status takes `webhook_id`, and get_balance, check_limits and get_topup_link take no input", async () => {
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const before = await peers.usdcBalance(NETWORK, payTo);

    const simulated = await call(client, over, 'simulate', { url: target.routes.paid.url });
    expect(simulated.isError).toBe(false);
    expect(simulated.answer.body).toMatchObject({ requiresPayment: true, feeBreakdown: { totalCredits: 13 } });

    const paid = await call(client, over, 'fetch', { url: target.routes.paid.url });
    expect(paid.isError).toBe(false);
    expect(paid.answer).toMatchObject({ status: 200, body: { ok: true, route: 'paid' } });
    expect(paid.answer.headers?.['x-payment-response']).toBeTruthy();
    expect(paid.answer.headers?.['x-credits-charged']).toBe('13');
    expect(await peers.usdcBalance(NETWORK, payTo)).toBe(before + PRICE);
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);

    const echoed = await call(client, over, 'fetch', {
      url: target.routes.echo.url,
      method: 'post',
      body: { city: 'Lisbon' },
      params: { days: '3' },
      headers: { 'X-Agent': 'httpayer-prompt' },
      timeout: 30,
    });
    expect(echoed.isError).toBe(false);
    expect(echoed.answer.body).toMatchObject({
      method: 'POST',
      query: { days: '3' },
      body: '{"city":"Lisbon"}',
      contentType: 'application/json',
      headers: { 'x-agent': 'httpayer-prompt' },
    });

    const webhook = await call(client, over, 'get_webhook_status', { webhook_id: UNKNOWN_WEBHOOK });
    expect(webhook.isError).toBe(true);
    expect(webhook.answer).toMatchObject({ status: 404, body: { code: 'not_found' } });
    expect(webhook.answer.body.details).toContain(UNKNOWN_WEBHOOK);

    const balance = await call(client, over, 'get_balance', {});
    expect(balance.answer.body).toMatchObject({ key_prefix: account.prefix, effective_available: 987 });
    const limits = await call(client, over, 'check_limits', {});
    expect(limits).toMatchObject({ isError: false, answer: { status: 200 } });
    const topup = await call(client, over, 'get_topup_link', {});
    expect(topup.isError).toBe(false);
    expect(topup.answer).toMatchObject({
      topup_url: `${t.service.url}/v1/credits/purchase`,
      method: 'POST',
      micro_usdc_per_credit: 1000,
    });
    // Nothing beyond the one paid fetch moved.
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);
  });

  it('our calls: fetch with api_url and method pays exactly the credits and the price; simulate, get_balance and check_limits answer', async () => {
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const before = await peers.usdcBalance(NETWORK, payTo);

    const simulated = await call(client, over, 'simulate', { api_url: target.routes.paid.url, method: 'GET' });
    expect(simulated.answer.body).toMatchObject({ requiresPayment: true, feeBreakdown: { totalCredits: 13 } });

    const paid = await call(client, over, 'fetch', { api_url: target.routes.paid.url, method: 'GET' });
    expect(paid.isError).toBe(false);
    expect(paid.answer.status).toBe(200);
    expect(paid.answer.body).toMatchObject({ ok: true, route: 'paid' });
    expect(paid.answer.headers?.['x-payment-response']).toBeTruthy();
    expect(await peers.usdcBalance(NETWORK, payTo)).toBe(before + PRICE);
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - 2n * CREDITS);

    const balance = await call(client, over, 'get_balance');
    expect(balance.answer.body).toMatchObject({ key_prefix: account.prefix, effective_available: 974 });
    const limits = await call(client, over, 'check_limits');
    expect(limits.answer.status).toBe(200);
  });

  it("get_usage and list_payments read the key's organisation's spend and payments, as the ledger and the HTTP API say", async () => {
    // After the two paid fetches above: two charged payments of CREDITS, and the grant of 1,000.
    const ledger = await ledgerSums(db, account.organisationId);
    expect(ledger).toMatchObject({ grant: 1_000n, charge: 2n * CREDITS, release: 0n });

    const usage = await call(client, over, 'get_usage');
    expect(usage.isError).toBe(false);
    expect(usage.answer.status).toBe(200);
    expect(usage.answer.body.totals).toMatchObject({
      payments: 2,
      credits: Number(ledger.charge),
      amount_micro_usdc: (2n * PRICE).toString(),
      granted_credits: Number(ledger.grant),
      released_credits: 0,
      pending_credits: 0,
    });
    const http = await t.client.get('/v1/usage', { headers: { 'x-api-key': account.key } });
    expect(usage.answer.body).toEqual(http.body);
    const today = new Date().toISOString().slice(0, 10);
    const oneDay = await call(client, over, 'get_usage', { from: today, to: today });
    expect(oneDay.answer.body.by_day).toEqual([expect.objectContaining({ day: today, credits: 26 })]);

    const listed = await call(client, over, 'list_payments', { kind: 'proxy_payment', limit: 1 });
    expect(listed.isError).toBe(false);
    expect(listed.answer.body.items).toEqual([
      expect.objectContaining({
        kind: 'proxy_payment',
        status: 'charged',
        key_prefix: account.prefix,
        network: NETWORK,
      }),
    ]);
    const every = await call(client, over, 'list_payments');
    const httpList = await t.client.get('/v1/payments', { headers: { 'x-api-key': account.key } });
    expect(every.answer.body).toEqual(httpList.body);
    expect(every.answer.body.items.map((item: { kind: string }) => item.kind)).toEqual([
      'proxy_payment',
      'proxy_payment',
      'grant',
    ]);
  });

  it('bad input is a tool error with our code naming it, changes nothing, and get_topup_link then gives no hint to pay', async () => {
    for (const name of ['get_balance', 'check_limits']) {
      const loose = await call(client, over, name, { verbose: true });
      expect(loose.isError).toBe(true);
      expect(loose.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
      expect(loose.answer.body.details).toContain('"verbose"');
    }
    for (const args of [{ credits: 0 }, { credits: 'many' }, { amount: 5 }]) {
      const topup = await call(client, over, 'get_topup_link', args);
      expect(topup.isError).toBe(true);
      expect(topup.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
      expect(topup.texts).toHaveLength(1);
      expect(topup.texts.join(' ')).not.toMatch(/pay/i);
    }
    const both = await call(client, over, 'fetch', { url: 'https://a.example/', api_url: 'https://b.example/' });
    expect(both.isError).toBe(true);
    expect(both.answer.body).toMatchObject({ code: 'validation_failed' });
    const noId = await call(client, over, 'get_webhook_status', {});
    expect(noId.isError).toBe(true);
    expect(noId.answer.body).toMatchObject({ code: 'validation_failed' });
    const long = await call(client, over, 'get_usage', { from: '2026-01-01', to: '2026-06-01' });
    expect(long.isError).toBe(true);
    expect(long.answer.body.details).toContain('at most 90 days');
    const tooMany = await call(client, over, 'list_payments', { limit: 500 });
    expect(tooMany.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
    const unknown = await call(client, over, 'list_payments', { wallet: '0xabc' });
    expect(unknown.isError).toBe(true);
    expect(JSON.stringify(unknown.answer.body.details)).toContain('wallet');
    const cursor = await call(client, over, 'list_payments', { cursor: 'bm90LWEtY3Vyc29y' });
    expect(cursor.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - 2n * CREDITS);
  });

  it('errors of ours are tool errors with our code: a ceiling below the price, an unknown record by our name of its id', async () => {
    const refused = await call(client, over, 'fetch', {
      api_url: peers.targets[NETWORK]!.routes.paid.url,
      method: 'GET',
      max_amount: '100',
    });
    expect(refused.isError).toBe(true);
    expect(refused.answer).toMatchObject({ status: 422, body: { code: 'price_above_limit', price: '12345' } });
    const missing = await call(client, over, 'get_webhook_status', { id: UNKNOWN_WEBHOOK });
    expect(missing.isError).toBe(true);
    expect(missing.answer.body.code).toBe('not_found');
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - 2n * CREDITS);
  });

  it('get_topup_link offers credits over x402 and says how to pay; search_endpoints finds a paid resource by text and price', async () => {
    const topup = await call(client, over, 'get_topup_link', { credits: 100 });
    expect(topup.isError).toBe(false);
    expect(topup.answer.body.accepts[0]).toMatchObject({ network: NETWORK, maxAmountRequired: '100000' });
    expect(topup.answer.headers?.['payment-required']).toBeTruthy();
    expect(topup.texts[1]).toContain(`POST ${t.service.url}/v1/credits/purchase`);

    const found = await call(client, over, 'search_endpoints', { query: '/paid', max_price: PRICE.toString() });
    expect(found.answer.body.items.map((item: { resource: string }) => item.resource)).toContain(
      peers.targets[NETWORK]!.routes.paid.url,
    );
    const none = await call(client, over, 'search_endpoints', { query: '/paid', max_price: '1' });
    expect(none.answer.body.items).toEqual([]);
  });

  /** relay_fetch paid (HTTPayer's `url` or our `api_url`), its three legs exact and its result naming the client's transaction. */
  async function expectRelayPaid(
    pay: (call: Record<string, unknown>) => Promise<Called>,
    args: Record<string, unknown>,
  ) {
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, NETWORK, payTo);
    const paid = await pay(args);
    expect(paid.isError).toBe(false);
    expect(paid.answer).toMatchObject({ status: 200, body: { ok: true, route: 'paid' } });
    expect(await relayLegBalances(peers, NETWORK, payTo)).toEqual({
      client: before.client - RELAY_TOTAL,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
    const row = await deliveredRelay(paid.answer.headers?.['x-client-payment']);
    expect(row.payer.toLowerCase()).toBe(peers.wallets.client.evm.address.toLowerCase());
    expect(paid.answer.headers?.['x-payment-response']).toBeTruthy();
    return paid;
  }

  if (over.startsWith('stdio')) {
    const version = over.endsWith('1') ? 1 : 2;
    it(`relay_fetch pays /relay from the configured wallet in x402 version ${version}, with our arguments and HTTPayer's`, async () => {
      const url = peers.targets[NETWORK]!.routes.paid.url;
      for (const args of [{ api_url: url, method: 'GET' }, { url }]) {
        const paid = await expectRelayPaid((call_) => call(client, over, 'relay_fetch', call_), args);
        // PAYMENT-RESPONSE answers a version 2 payment (PAYMENT-SIGNATURE) only.
        if (version === 2) expect(paid.answer.headers?.['payment-response']).toBeTruthy();
        else expect(paid.answer.headers?.['payment-response']).toBeUndefined();
      }
    });
  } else {
    it("relay_fetch without a wallet answers the 402's offers in both versions, then takes the agent's payment in either version", async () => {
      const url = peers.targets[NETWORK]!.routes.paid.url;
      const ask = () => call(client, over, 'relay_fetch', { url });
      const payWith = (payment: Record<string, string>) => (args: Record<string, unknown>) =>
        call(client, over, 'relay_fetch', { ...args, ...payment });

      const offer = await ask();
      expect(offer.isError).toBe(true);
      expect(offer.answer).toMatchObject({ status: 402, body: { code: 'payment_required' } });
      expect(offer.answer.headers?.['payment-required']).toBeTruthy();

      // Version 1: X-PAYMENT, in x_payment.
      const { header } = await peers.signEvmPayment(offer.answer.body.accepts[0] as PeerRequirements);
      const v1 = await expectRelayPaid(payWith({ x_payment: header }), { api_url: url, method: 'GET' });
      expect(v1.answer.headers?.['payment-response']).toBeUndefined();

      // Version 2: a PAYMENT-SIGNATURE for PAYMENT-REQUIRED, in x_payment and in payment_signature.
      for (const argument of ['x_payment', 'payment_signature']) {
        const signature = await paymentSignatureFor(await ask());
        const v2 = await expectRelayPaid(payWith({ [argument]: signature }), { url });
        expect(v2.answer.headers?.['payment-response']).toBeTruthy();
      }

      const both = await call(client, over, 'relay_fetch', { url, x_payment: header, payment_signature: header });
      expect(both).toMatchObject({ isError: true, answer: { status: 400, body: { code: 'validation_failed' } } });
    });
  }
});
