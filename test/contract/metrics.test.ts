// GET /metrics: the Prometheus text of the instance, declared in the document (text/plain). After
// bursts past CAP_RELAY and CAP_PROXY, it counts exactly the 429s the clients received, per cap
// group, in the refusal counter and in the request histogram; requests in flight per group match
// GET /metrics/rate-limits; each service owns its registry.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdRequest, type HeldRequest } from '../support/held-request';
import { growth, sample } from '../support/metrics';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let t: TestService;
beforeAll(async () => {
  t = await startTestService({ CAP_RELAY: '3', CAP_PROXY: '2', CAP_WEBHOOKS: '2' });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

// A loopback address outside the allow list: an admitted request is refused (400) before anything is sent.
const call = { api_url: 'http://127.0.0.1:9/data', method: 'GET' };

async function scrape(service: TestService = t): Promise<string> {
  const response = await service.client.get('/metrics');
  expect(response.status).toBe(200);
  expect(response.operationId).toBe('getMetrics');
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return response.text;
}

async function waitForActive(group: 'relay' | 'proxy', active: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    if ((await t.client.get('/metrics/rate-limits')).body[group].active === active) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`${group} never reached ${active} active requests`);
}

/** A burst of held requests at once: the cap admits `cap`, the rest are answered 429 at once. */
async function burst(path: string, size: number, cap: number, group: 'relay' | 'proxy'): Promise<number[]> {
  const held: HeldRequest[] = Array.from({ length: size }, () => holdRequest(t.service.url, 'POST', path, call));
  const deadline = Date.now() + 5_000;
  while (held.filter((request) => request.answered()).length < size - cap && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 10));
  await waitForActive(group, cap);
  const text = await scrape();
  expect(sample(text, `prs_requests_in_flight{group="${group}"}`)).toBe(cap);
  expect(sample(text, `prs_requests_in_flight_limit{group="${group}"}`)).toBe(cap);
  const results = await Promise.all(held.map((request) => request.release()));
  await waitForActive(group, 0);
  return results.map((result) => result.status);
}

describe('GET /metrics', () => {
  it('starts with every cap group and paid-call series at zero', async () => {
    const text = await scrape();
    for (const group of ['proxy', 'relay', 'webhooks'])
      expect(sample(text, `prs_cap_refusals_total{group="${group}"}`)).toBe(0);
    for (const mode of ['proxy', 'relay', 'chat'])
      for (const result of ['paid', 'refunded', 'failed', 'pending'])
        expect(sample(text, `prs_paid_calls_total{mode="${mode}",result="${result}"}`)).toBe(0);
    expect(text).toContain('# TYPE prs_http_request_duration_seconds histogram');
    expect(text).toContain('# TYPE prs_rpc_request_duration_seconds histogram');
    expect(text).toContain('# TYPE prs_jobs_total counter');
    expect(text).toContain('process_cpu_seconds_total');
  });

  it('counts exactly the 429s the clients received, per cap group, in the refusals and the request histogram', async () => {
    const before = await scrape();
    const relay = [...(await burst('/relay/sim', 25, 3, 'relay')), ...(await burst('/relay', 10, 3, 'relay'))];
    const proxy = await burst('/proxy', 30, 2, 'proxy');
    const refused = (statuses: number[]) => statuses.filter((status) => status === 429).length;
    expect(refused(relay)).toBe(22 + 7);
    expect(refused(proxy)).toBe(28);

    const delta = growth(before, await scrape());
    expect(delta('prs_cap_refusals_total{group="relay"}')).toBe(refused(relay));
    expect(delta('prs_cap_refusals_total{group="proxy"}')).toBe(refused(proxy));
    expect(delta('prs_cap_refusals_total{group="webhooks"}')).toBe(0);
    // The same 429s in the request histogram, under the operation each was for.
    const histogram = 'prs_http_request_duration_seconds_count';
    expect(delta(`${histogram}{operation="postRelaySim",method="POST",status="429"}`)).toBe(22);
    expect(delta(`${histogram}{operation="postRelay",method="POST",status="429"}`)).toBe(7);
    expect(delta(`${histogram}{operation="postProxy",method="POST",status="429"}`)).toBe(28);
    // The admitted ones answered 400 (the target is refused) or 401 (/proxy has no key): not paid calls.
    expect(delta(`${histogram}{operation="postRelaySim",method="POST",status="400"}`)).toBe(3);
    expect(delta(`${histogram}{operation="postProxy",method="POST",status="401"}`)).toBe(2);
    for (const result of ['paid', 'refunded', 'failed', 'pending'])
      expect(delta(`prs_paid_calls_total{mode="proxy",result="${result}"}`)).toBe(0);
  });

  it('counts each request by its operation, and an unknown path as none', async () => {
    const before = await scrape();
    await t.client.get('/config');
    await t.client.get('/no-such-path');
    const delta = growth(before, await scrape());
    expect(delta('prs_http_request_duration_seconds_count{operation="getConfig",method="GET",status="200"}')).toBe(1);
    expect(delta('prs_http_request_duration_seconds_count{operation="none",method="GET",status="404"}')).toBe(1);
    // The scrape before this one is counted too.
    expect(delta('prs_http_request_duration_seconds_count{operation="getMetrics",method="GET",status="200"}')).toBe(1);
  });

  it('belongs to its service: a second service in this process counts from zero', async () => {
    const other = await startTestService({ CAP_RELAY: '1' });
    try {
      const text = await scrape(other);
      expect(sample(text, 'prs_cap_refusals_total{group="relay"}')).toBe(0);
      expect(sample(text, 'prs_requests_in_flight_limit{group="relay"}')).toBe(1);
    } finally {
      await other.stop();
    }
  });
});
