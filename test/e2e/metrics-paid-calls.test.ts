// GET /metrics after paid calls against the local peers: a paid /proxy call is counted as paid in
// prs_paid_calls_total{mode="proxy"} and in the request histogram of postProxy 200; a call refused
// for credits after the target asked to be paid is failed; a free pass-through is no paid call.
// The chains' JSON-RPC requests are timed by network. Every answer is checked against the document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { growth } from '../support/metrics';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let peers: Peers;
let t: TestService;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], pricesMicroUsdc: { paid: 5_000n } });
  t = await startProxyService(peers);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

async function scrape(): Promise<string> {
  const response = await t.client.get('/metrics');
  expect(response.status).toBe(200);
  return response.text;
}

describe('paid calls in /metrics', () => {
  it('a paid /proxy call is counted as paid and in the request histogram; a free one is no paid call', async () => {
    const target = peers.targets['base-sepolia']!;
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    const before = await scrape();

    const paid = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(paid.status).toBe(200);
    expect(paid.headers.get('x-payment-response')).toBeTruthy();
    const free = await t.client.post(
      '/proxy',
      { api_url: target.routes.free.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(free.status).toBe(200);

    const delta = growth(before, await scrape());
    expect(delta('prs_paid_calls_total{mode="proxy",result="paid"}')).toBe(1);
    for (const result of ['refunded', 'failed', 'pending'])
      expect(delta(`prs_paid_calls_total{mode="proxy",result="${result}"}`)).toBe(0);
    expect(delta('prs_http_request_duration_seconds_count{operation="postProxy",method="POST",status="200"}')).toBe(2);
    // Our payment was read on the chain: the EVM requests are timed under the network's name.
    expect(
      delta('prs_rpc_request_duration_seconds_count{network="base-sepolia",method="eth_call",outcome="ok"}'),
    ).toBeGreaterThan(0);
  });

  it('a target asking more than the account can pay is a failed paid call', async () => {
    const target = peers.targets['base-sepolia']!;
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1n });
    const before = await scrape();
    const refused = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(refused.status).toBe(402);
    expect(refused.body.code).toBe('insufficient_credits');
    const delta = growth(before, await scrape());
    expect(delta('prs_paid_calls_total{mode="proxy",result="failed"}')).toBe(1);
    expect(delta('prs_paid_calls_total{mode="proxy",result="paid"}')).toBe(0);
    expect(delta('prs_http_request_duration_seconds_count{operation="postProxy",method="POST",status="402"}')).toBe(1);
  });
});
