import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../support/service';
import { holdRequest, type HeldRequest } from '../support/held-request';
import { ifStarted } from '../support/teardown';

let t: TestService;
beforeAll(async () => {
  t = await startTestService({ CAP_RELAY: '3', CAP_PROXY: '2', CAP_WEBHOOKS: '2' });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

// /relay* and /proxy make real outbound calls: a loopback address outside the allow list is refused
// (400) before anything is sent, so a request admitted by mistake could never reach a real host.
const proxyBody = { api_url: 'http://127.0.0.1:9/data', method: 'GET' };
const simBody = proxyBody;

async function waitForActive(group: 'relay' | 'proxy' | 'webhooks', active: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const res = await t.client.get('/metrics/rate-limits');
    if (res.body[group].active === active) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`${group} never reached ${active} active requests`);
}

describe('concurrency caps', () => {
  it('answers 429 with Retry-After at the cap, reports exactly the limit, and frees a slot when a request ends', async () => {
    const held: HeldRequest[] = [0, 1, 2].map(() => holdRequest(t.service.url, 'POST', '/relay/sim', simBody));
    await waitForActive('relay', 3);

    const refused = await t.client.post('/relay/sim', simBody);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.body).toEqual({
      code: 'capacity_exceeded',
      error: 'Too Many Requests',
      message: expect.any(String),
      details: '3/3',
      retryAfter: 1,
    });
    // The other routes of the group share the cap; other groups do not.
    expect((await t.client.post('/relay', simBody)).status).toBe(429);
    expect((await t.client.get('/relay/limits/0x0000000000000000000000000000000000000001')).status).toBe(429);
    expect((await t.client.post('/sim', simBody)).status).toBe(429);
    expect((await t.client.get('/webhooks/6f1c1f4e-0000-4000-8000-000000000000')).status).toBe(404);

    const metrics = await t.client.get('/metrics/rate-limits');
    expect(metrics.body.relay).toEqual({ active: 3, limit: 3, utilization: '100.0%' });
    expect(metrics.body.proxy).toEqual({ active: 0, limit: 2, utilization: '0.0%' });

    const finished = await held[0]!.release();
    expect(finished.status).toBe(400);
    await waitForActive('relay', 2);
    expect((await t.client.post('/relay/sim', simBody)).status).toBe(400);

    // A client that goes away frees its slot too.
    held[1]!.abort();
    await waitForActive('relay', 1);
    await held[2]!.release();
    await waitForActive('relay', 0);
  });

  it('caps /webhooks/* and /proxy* the same way', async () => {
    const webhooks = [0, 1].map(() =>
      holdRequest(t.service.url, 'GET', '/webhooks/6f1c1f4e-0000-4000-8000-000000000000', {}),
    );
    const proxies = [0, 1].map(() => holdRequest(t.service.url, 'POST', '/proxy', proxyBody));
    await waitForActive('webhooks', 2);
    await waitForActive('proxy', 2);
    const webhook = await t.client.get('/webhooks/6f1c1f4e-0000-4000-8000-000000000000');
    expect(webhook.status).toBe(429);
    expect(webhook.body.details).toBe('2/2');
    const proxy = await t.client.post('/proxy', proxyBody, { headers: { 'x-api-key': 'anything' } });
    expect(proxy.status).toBe(429);
    expect(proxy.headers.get('retry-after')).toBe('1');
    for (const request of [...webhooks, ...proxies]) await request.release();
    await waitForActive('webhooks', 0);
    await waitForActive('proxy', 0);
  });

  it('never admits more than the cap under a burst', async () => {
    const burst = Array.from({ length: 40 }, () => holdRequest(t.service.url, 'POST', '/relay/sim', simBody));
    // Every request of the burst is in: 3 held by the service, the rest already answered.
    const deadline = Date.now() + 5_000;
    while (burst.filter((request) => request.answered()).length < 37 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await waitForActive('relay', 3);
    const metrics = await t.client.get('/metrics/rate-limits');
    expect(metrics.body.relay.active).toBe(3);
    const results = await Promise.all(burst.map((request) => request.release()));
    const statuses = results.map((result) => result.status);
    expect(statuses.filter((status) => status === 429).length).toBe(37);
    expect(statuses.filter((status) => status === 400).length).toBe(3);
  });
});

describe('a request whose client leaves while its work runs', () => {
  it('keeps its slot until the work ends, so the work in flight never passes the cap', async () => {
    const { handlers } = await import('../../handlers/index');
    let open = 0;
    let openMax = 0;
    const gates: Array<() => void> = [];
    const slowWebhook = (async (ctx: any, deps: any) => {
      open += 1;
      openMax = Math.max(openMax, open);
      await new Promise<void>((resolve) => gates.push(resolve));
      open -= 1;
      return handlers.getWebhook!(ctx, deps);
    }) as typeof handlers.getWebhook;
    const s = await startTestService({ CAP_WEBHOOKS: '2' }, { handlers: { ...handlers, getWebhook: slowWebhook } });
    try {
      const path = '/webhooks/6f1c1f4e-0000-4000-8000-000000000000';
      const leaving = [0, 1].map(() => {
        const controller = new AbortController();
        const done = fetch(`${s.service.url}${path}`, { signal: controller.signal }).catch(() => 'aborted');
        return { controller, done };
      });
      const deadline = Date.now() + 5_000;
      while (gates.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(gates).toHaveLength(2);
      for (const request of leaving) request.controller.abort();
      await Promise.all(leaving.map((request) => request.done));
      await new Promise((resolve) => setTimeout(resolve, 100));
      // Both clients are gone, their work is not: the slots stay taken and a third request is refused.
      expect((await s.client.get('/metrics/rate-limits')).body.webhooks.active).toBe(2);
      expect((await s.client.get(path)).status).toBe(429);
      // The work ends: the slots free.
      for (const release of gates.splice(0)) release();
      const freed = Date.now() + 5_000;
      while ((await s.client.get('/metrics/rate-limits')).body.webhooks.active !== 0 && Date.now() < freed) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect((await s.client.get('/metrics/rate-limits')).body.webhooks.active).toBe(0);
      const admitted = s.client.get(path);
      while (gates.length < 1) await new Promise((resolve) => setTimeout(resolve, 10));
      gates.splice(0).forEach((release) => release());
      expect((await admitted).status).toBe(404);
      expect(openMax).toBe(2);
    } finally {
      gates.splice(0).forEach((release) => release());
      await s.stop();
    }
  });
});
