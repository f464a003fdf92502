// GET /discovery/resources against the local peers: after a paid call the resource is listed in
// the Bazaar's list format with the offer we paid, its success share and median latency, as
// origin and path only (the query string, the body and the payer never appear); off by default.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { loadConfig } from '../../payments/config';
import { createTestAccount } from '../support/accounts';
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
