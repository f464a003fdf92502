// GET /discovery/resources against the local peers: after a paid call the resource is listed in
// the Bazaar's list format with the offer we paid, its success share and median latency, as
// origin and path only (the query string, the body and the payer never appear); off by default.
// A resource paid with several methods is one entry, and the official Bazaar client of
// @x402/extensions lists with each of its filters.
import { HTTPFacilitatorClient } from '@x402/core/server';
import { withBazaar } from '@x402/extensions/bazaar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { loadConfig } from '../../payments/basics/config';
import { createTestAccount } from '../support/accounts';
import { checkResponse } from '../support/contract';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 4_321n;
const NETWORK = 'base-sepolia';

let peers: Peers;
let t: TestService;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE } });
  t = await startProxyService(peers, { DISCOVERY: 'public' });
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

describe('discovery', () => {
  it('is off unless DISCOVERY=public', () => {
    expect(loadConfig({}).discovery).toBe('off');
    expect(loadConfig({ DISCOVERY: 'public' }).discovery).toBe('public');
    expect(() => loadConfig({ DISCOVERY: 'yes' })).toThrow(/DISCOVERY/);
  });

  it('lists a resource after a paid call, with its offer, success share and latency, and hides its query string', async () => {
    const empty = await t.client.get('/discovery/resources');
    expect(empty.status).toBe(200);
    expect(empty.body).toEqual({ x402Version: 1, items: [], pagination: { limit: 20, offset: 0, total: 0 } });

    const target = peers.targets[NETWORK]!;
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    const secretUrl = `${target.routes.paidEcho.url}?token=s3cr3t-query`;
    const paid = await t.client.post(
      '/proxy',
      { api_url: secretUrl, method: 'POST', json: { private: 'b0dy-secret' } },
      { headers: { 'x-api-key': key } },
    );
    expect(paid.status).toBe(200);

    const res = await t.client.get('/discovery/resources');
    expect(res.status).toBe(200);
    const resource = new URL(target.routes.paidEcho.url);
    expect(res.body.pagination).toEqual({ limit: 20, offset: 0, total: 1 });
    const [item] = res.body.items;
    expect(item).toMatchObject({
      resource: `${resource.origin}${resource.pathname}`,
      type: 'http',
      x402Version: 1,
      extensions: { router: { method: 'POST', paidCalls: 1, successRate: 1 } },
    });
    expect(item.accepts).toEqual([
      expect.objectContaining({
        scheme: 'exact',
        network: NETWORK,
        maxAmountRequired: PRICE.toString(),
        payTo: target.routes.paidEcho.payTo,
        resource: `${resource.origin}${resource.pathname}`,
      }),
    ]);
    expect(item.extensions.router.p50LatencyMs).toBeGreaterThanOrEqual(0);
    expect(res.text).not.toContain('s3cr3t-query');
    expect(res.text).not.toContain('b0dy-secret');
    expect(res.text.toLowerCase()).not.toContain(peers.wallets.service.evm.address.toLowerCase());

    expect((await t.client.get('/discovery/resources?type=mcp')).body.items).toEqual([]);
  });
});

/** A paid /proxy call of `url` with `method`, which must answer 200. */
async function payFor(key: string, url: string, method: 'GET' | 'POST'): Promise<void> {
  const res = await t.client.post('/proxy', { api_url: url, method }, { headers: { 'x-api-key': key } });
  expect(res.status).toBe(200);
}

const origin = (url: string) => {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname}`;
};

describe('one entry per resource', () => {
  it('lists a resource paid with GET and with POST once, with both methods, and a paging walk sees each resource once', async () => {
    const target = peers.targets[NETWORK]!;
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    // paidEcho was paid with POST above; now with GET, and another resource with GET.
    await payFor(key, target.routes.paidEcho.url, 'GET');
    await payFor(key, target.routes.paid.url, 'GET');

    const all = await t.client.get('/discovery/resources');
    expect(all.status).toBe(200);
    expect(all.body.pagination).toEqual({ limit: 20, offset: 0, total: 2 });
    const echo = all.body.items.find((item: any) => item.resource === origin(target.routes.paidEcho.url));
    expect(echo.extensions.router).toMatchObject({ methods: ['GET', 'POST'], method: 'GET', paidCalls: 2 });
    expect(echo.accepts).toHaveLength(1);

    const walked: string[] = [];
    for (let offset = 0; ; offset += 1) {
      const page = await t.client.get(`/discovery/resources?limit=1&offset=${offset}`);
      expect(page.status).toBe(200);
      expect(page.body.pagination).toEqual({ limit: 1, offset, total: 2 });
      if (page.body.items.length === 0) break;
      walked.push(...page.body.items.map((item: any) => item.resource));
    }
    expect(walked.sort()).toEqual([origin(target.routes.paid.url), origin(target.routes.paidEcho.url)].sort());
  });
});

describe("the Bazaar client's filters (withBazaar of @x402/extensions, unmodified)", () => {
  /** Runs `list` with every answer of the service checked against the document, as every test's are. */
  async function checked<T>(list: () => Promise<T>): Promise<T> {
    const realFetch = globalThis.fetch;
    globalThis.fetch = async (input, init) => {
      const response = await realFetch(input, init);
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (url.origin === new URL(t.service.url).origin) {
        const text = await response.clone().text();
        const json = (response.headers.get('content-type') ?? '').startsWith('application/json');
        await checkResponse(init?.method ?? 'GET', `${url.pathname}${url.search}`, {
          status: response.status,
          headers: response.headers,
          body: json && text !== '' ? JSON.parse(text) : text,
          text,
          operationId: undefined,
        });
      }
      return response;
    };
    try {
      return await list();
    } finally {
      globalThis.fetch = realFetch;
    }
  }

  it('lists by network (v1 name or CAIP-2), scheme, payTo, type, extensions, limit and offset', async () => {
    const target = peers.targets[NETWORK]!;
    const bazaar = withBazaar(new HTTPFacilitatorClient({ url: t.service.url })).extensions.bazaar;
    const resources = async (params: Parameters<typeof bazaar.listResources>[0]) => {
      const listed = await checked(() => bazaar.listResources(params));
      return listed.items.map((item) => item.resource).sort();
    };
    const both = [origin(target.routes.paid.url), origin(target.routes.paidEcho.url)].sort();

    expect(await resources({})).toEqual(both);
    expect(await resources({ network: NETWORK })).toEqual(both);
    expect(await resources({ network: 'eip155:84532' })).toEqual(both);
    expect(await resources({ network: 'eip155:8453' })).toEqual([]);
    expect(await resources({ network: 'solana-devnet' })).toEqual([]);
    expect(await resources({ network: 'eip155:999999999' })).toEqual([]);
    expect(await resources({ scheme: 'exact' })).toEqual(both);
    expect(await resources({ scheme: 'upto' })).toEqual([]);
    expect(await resources({ payTo: target.routes.paid.payTo.toUpperCase().replace('0X', '0x') })).toContain(
      origin(target.routes.paid.url),
    );
    expect(await resources({ payTo: `0x${'9'.repeat(40)}` })).toEqual([]);
    expect(await resources({ type: 'http' })).toEqual(both);
    expect(await resources({ type: 'mcp' })).toEqual([]);
    expect(await resources({ extensions: 'router' })).toEqual(both);
    expect(await resources({ extensions: 'bazaar' })).toEqual([]);
    expect(await resources({ network: 'eip155:84532', scheme: 'exact', type: 'http', extensions: 'router' })).toEqual(
      both,
    );

    const second = await checked(() => bazaar.listResources({ network: 'eip155:84532', limit: 1, offset: 1 }));
    expect(second.items).toHaveLength(1);
    expect(second.pagination).toEqual({ limit: 1, offset: 1, total: 2 });
  });
});
