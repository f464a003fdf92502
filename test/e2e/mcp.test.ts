// The router's MCP server, driven by the SDK's own client, over streamable HTTP (POST /mcp of the
// service, every answer checked against the document) and over stdio (`mcp/stdio.ts`, the bin's
// program, as a child process with a wallet): the tools are listed with the document's schemas and
// each is called against the local peers. A paid fetch moves exactly the credits and the price;
// relay_fetch moves exactly the three legs; errors of ours come back as tool errors with our code.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { organisationBalance } from '../../payments/credits';
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
}

async function call(client: Client, over: string, name: string, args: Record<string, unknown> = {}): Promise<Called> {
  const result = (await client.callTool({ name, arguments: args })) as {
    isError?: boolean;
    content: Array<{ type: string; text: string }>;
  };
  const text = result.content[0]!.text;
  transcript.push(
    `[${over}] ${name} ${JSON.stringify(args)}\n  -> ${result.isError ? 'error ' : ''}${text.slice(0, 600)}`,
  );
  return { isError: result.isError === true, answer: JSON.parse(text) };
}

const overHttp = (account: TestAccount): Transport =>
  new StreamableHTTPClientTransport(new URL(`${t.service.url}/mcp`), {
    requestInit: { headers: { 'x-api-key': account.key } },
    fetch: contractFetch(),
  });

const overStdio = (account: TestAccount): Transport =>
  new StdioClientTransport({
    command: process.execPath,
    args: [path.join(ROOT, 'node_modules/tsx/dist/cli.mjs'), path.join(ROOT, 'mcp/stdio.ts')],
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '',
      ROUTER_URL: t.service.url,
      ROUTER_API_KEY: account.key,
      ROUTER_WALLET_KEY: peers.wallets.client.evm.privateKey,
    },
    stderr: 'pipe',
  });

describe.each([
  ['streamable HTTP at /mcp', overHttp],
  ['stdio', overStdio],
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

  it("lists HTTPayer's tool names and relay_fetch, each with a schema of the document", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name).sort()).toEqual(TOOLS);
    const fetchTool = tools.find((tool) => tool.name === 'fetch')!;
    expect(fetchTool.inputSchema).toMatchObject({
      type: 'object',
      required: ['api_url', 'method'],
      properties: { api_url: { type: 'string' }, max_amount: { type: 'string', pattern: '^[1-9][0-9]{0,17}$' } },
    });
    expect(tools.find((tool) => tool.name === 'get_topup_link')!.inputSchema).toMatchObject({
      required: ['credits'],
    });
    expect(tools.find((tool) => tool.name === 'get_usage')!.inputSchema).toEqual({
      type: 'object',
      additionalProperties: false,
      required: [],
      properties: {
        from: expect.objectContaining({ type: 'string', format: 'date' }),
        to: expect.objectContaining({ type: 'string', format: 'date' }),
      },
    });
    const listPayments = tools.find((tool) => tool.name === 'list_payments')!.inputSchema;
    expect(Object.keys(listPayments.properties ?? {}).sort()).toEqual(
      ['cursor', 'from', 'host', 'key', 'kind', 'limit', 'status', 'to'].sort(),
    );
    expect(listPayments.properties).toMatchObject({
      limit: { type: 'integer', minimum: 1, maximum: 200 },
      status: { enum: expect.arrayContaining(['pending', 'charged', 'released', 'credited']) },
    });
    transcript.push(`[${over}] tools/list -> ${tools.map((tool) => tool.name).join(', ')}`);
  });

  it('fetch pays a target and moves exactly the credits and the price; simulate, get_balance and check_limits answer', async () => {
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
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);

    const balance = await call(client, over, 'get_balance');
    expect(balance.answer.body).toMatchObject({ key_prefix: account.prefix, effective_available: 987 });
    const limits = await call(client, over, 'check_limits');
    expect(limits.answer.status).toBe(200);
  });

  it("get_usage and list_payments read the key's organisation's spend and payments, as the ledger and the HTTP API say", async () => {
    // After the paid fetch above: one charged payment of CREDITS, and the grant of 1,000.
    const ledger = await ledgerSums(db, account.organisationId);
    expect(ledger).toMatchObject({ grant: 1_000n, charge: CREDITS, release: 0n });

    const usage = await call(client, over, 'get_usage');
    expect(usage.isError).toBe(false);
    expect(usage.answer.status).toBe(200);
    expect(usage.answer.body.totals).toMatchObject({
      payments: 1,
      credits: Number(ledger.charge),
      amount_micro_usdc: PRICE.toString(),
      granted_credits: Number(ledger.grant),
      released_credits: 0,
      pending_credits: 0,
    });
    expect(usage.answer.body.by_key).toEqual([expect.objectContaining({ key_prefix: account.prefix, credits: 13 })]);
    const http = await t.client.get('/v1/usage', { headers: { 'x-api-key': account.key } });
    expect(usage.answer.body).toEqual(http.body);
    const today = new Date().toISOString().slice(0, 10);
    const oneDay = await call(client, over, 'get_usage', { from: today, to: today });
    expect(oneDay.answer.body.by_day).toEqual([expect.objectContaining({ day: today, credits: 13 })]);

    const listed = await call(client, over, 'list_payments', { kind: 'proxy_payment', limit: 10 });
    expect(listed.isError).toBe(false);
    const [payment, ...others] = listed.answer.body.items;
    expect(others).toEqual([]);
    const row = await db
      .selectFrom('proxy_payments')
      .selectAll()
      .where('organisation_id', '=', account.organisationId)
      .executeTakeFirstOrThrow();
    expect(payment).toMatchObject({
      id: `pay_${row.id}`,
      kind: 'proxy_payment',
      status: 'charged',
      key_prefix: account.prefix,
      credits: Number(CREDITS),
      amount_micro_usdc: PRICE.toString(),
      tx_hash: row.tx_hash,
      network: NETWORK,
    });
    const every = await call(client, over, 'list_payments');
    const httpList = await t.client.get('/v1/payments', { headers: { 'x-api-key': account.key } });
    expect(every.answer.body).toEqual(httpList.body);
    expect(every.answer.body.items.map((item: { kind: string }) => item.kind)).toEqual(['proxy_payment', 'grant']);
  });

  it('get_usage and list_payments refuse bad input with a tool error naming it, and change nothing', async () => {
    const long = await call(client, over, 'get_usage', { from: '2026-01-01', to: '2026-06-01' });
    expect(long.isError).toBe(true);
    expect(long.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
    expect(long.answer.body.details).toContain('at most 90 days');
    const tooMany = await call(client, over, 'list_payments', { limit: 500 });
    expect(tooMany.isError).toBe(true);
    expect(tooMany.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
    expect(JSON.stringify(tooMany.answer.body.details)).toContain('limit');
    const unknown = await call(client, over, 'list_payments', { wallet: '0xabc' });
    expect(unknown.isError).toBe(true);
    expect(JSON.stringify(unknown.answer.body.details)).toContain('wallet');
    const cursor = await call(client, over, 'list_payments', { cursor: 'bm90LWEtY3Vyc29y' });
    expect(cursor.isError).toBe(true);
    expect(cursor.answer).toMatchObject({ status: 400, body: { code: 'validation_failed' } });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);
  });

  it('errors of ours are tool errors with our code: a ceiling below the price, an unknown record', async () => {
    const refused = await call(client, over, 'fetch', {
      api_url: peers.targets[NETWORK]!.routes.paid.url,
      method: 'GET',
      max_amount: '100',
    });
    expect(refused.isError).toBe(true);
    expect(refused.answer).toMatchObject({ status: 422, body: { code: 'price_above_limit', price: '12345' } });
    const missing = await call(client, over, 'get_webhook_status', { id: '3f1c2a8e-6f4b-4d7a-9d4e-2b8a1c0e5f71' });
    expect(missing.isError).toBe(true);
    expect(missing.answer.body.code).toBe('not_found');
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);
  });

  it('get_topup_link offers credits over x402; search_endpoints finds a paid resource by text and price', async () => {
    const topup = await call(client, over, 'get_topup_link', { credits: 100 });
    expect(topup.isError).toBe(false);
    expect(topup.answer.body.accepts[0]).toMatchObject({ network: NETWORK, maxAmountRequired: '100000' });

    const found = await call(client, over, 'search_endpoints', { query: '/paid', max_price: PRICE.toString() });
    expect(found.answer.body.items.map((item: { resource: string }) => item.resource)).toContain(
      peers.targets[NETWORK]!.routes.paid.url,
    );
    const none = await call(client, over, 'search_endpoints', { query: '/paid', max_price: '1' });
    expect(none.answer.body.items).toEqual([]);
  });

  it('relay_fetch pays /relay and moves exactly the three legs', async () => {
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, NETWORK, payTo);
    let paid: Called;
    if (over === 'stdio') {
      // The stdio server pays with its configured wallet (@x402/fetch, version 2).
      paid = await call(client, over, 'relay_fetch', { api_url: target.routes.paid.url, method: 'GET' });
    } else {
      // Over HTTP the service holds no wallet of the agent's: the 402's offer, then the agent's payment.
      const offer = await call(client, over, 'relay_fetch', { api_url: target.routes.paid.url, method: 'GET' });
      expect(offer.isError).toBe(true);
      expect(offer.answer).toMatchObject({ status: 402, body: { code: 'payment_required' } });
      const { header } = await peers.signEvmPayment(offer.answer.body.accepts[0] as PeerRequirements);
      paid = await call(client, over, 'relay_fetch', {
        api_url: target.routes.paid.url,
        method: 'GET',
        x_payment: header,
      });
    }
    expect(paid.isError).toBe(false);
    expect(paid.answer.status).toBe(200);
    expect(paid.answer.body).toMatchObject({ ok: true, route: 'paid' });
    expect(await relayLegBalances(peers, NETWORK, payTo)).toEqual({
      client: before.client - RELAY_TOTAL,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
  });
});
