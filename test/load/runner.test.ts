// The short form of the load runner (load/runner; `npm run bench` is the long form, load/caps.js
// the k6 form): each capped group driven to three times its cap with autocannon. Counts, not
// timings: exactly the cap is admitted (a target that holds requests open counts the arrivals),
// the surplus is answered 429 with Retry-After and the documented body, every slot comes back.
// Every response autocannon receives is checked against the OpenAPI document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAutocannon, type LoadRequest } from '../../load/runner/autocannon';
import { runCapsScenario, type CapsReport, type ClientHolds, type LoadResult } from '../../load/runner/caps';
import { problemsOf429 } from '../../load/runner/checks';
import { requestOf, scenarios, type Bindings, type CapGroup } from '../../load/runner/scenarios';
import { startPeers, type Peers, type Target } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { checkResponse, type ContractResponse } from '../support/contract';
import { holdRequest, type HeldRequest } from '../support/held-request';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const CAPS: Record<CapGroup, number> = { proxy: 5, relay: 4, webhooks: 6 };
const OVERLOAD_SECONDS = 0.5;

let peers: Peers;
let target: Target;
let t: TestService;
let bindings: Bindings;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], holdTimeoutMs: 30_000 });
  target = peers.targets['base-sepolia']!;
  // Targets are named by address: the test resolver never needs to resolve a name.
  t = await startProxyService(peers, {
    CAP_PROXY: String(CAPS.proxy),
    CAP_RELAY: String(CAPS.relay),
    CAP_WEBHOOKS: String(CAPS.webhooks),
  });
  const account = await createTestAccount(t.database.handle.db, { credits: 1_000n });
  bindings = {
    holdUrl: target.routes.hold.url,
    freeUrl: target.routes.free.url,
    paidUrl: target.routes.paid.url,
    apiKey: account.key,
  };
  // One call of each kind first, so that no first-call work lands in the middle of an overload.
  const call = { api_url: target.routes.free.url, method: 'GET' };
  expect((await t.client.post('/proxy', call, { headers: { 'x-api-key': account.key } })).status).toBe(200);
  expect((await t.client.post('/relay', call)).status).toBe(200);
});

afterAll(async () => {
  ifStarted(target)?.hold.release();
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

/** autocannon against the service; every answer is checked against the document (failures collected). */
function contractLoad(
  request: LoadRequest,
  connections: number,
  limits: { durationS?: number; amount?: number },
): { stop: () => void; done: Promise<LoadResult & { statuses: Record<number, number>; violations: string[] }> } {
  const checks: Array<Promise<void>> = [];
  const violations: string[] = [];
  const statuses: Record<number, number> = {};
  const bad429: string[] = [];
  const running = startAutocannon({
    baseUrl: t.service.url,
    request,
    connections,
    ...(limits.amount === undefined ? { duration: limits.durationS } : { amount: limits.amount }),
    // Longer than the run: a held request is never timed out and sent again.
    timeoutS: 20,
    onResponse: (status, body, rawHeaders) => {
      statuses[status] = (statuses[status] ?? 0) + 1;
      const headers = new Headers();
      for (const [name, value] of Object.entries(rawHeaders))
        headers.set(name, Array.isArray(value) ? value.join(', ') : value);
      const isJson = (headers.get('content-type') ?? '').startsWith('application/json');
      const response: ContractResponse = {
        status,
        headers,
        text: body,
        body: isJson && body ? JSON.parse(body) : body,
        operationId: undefined,
      };
      checks.push(
        checkResponse(request.method, request.path, response).catch(
          (error: unknown) => void violations.push(error instanceof Error ? error.message : String(error)),
        ),
      );
      if (status === 429) {
        const lowered = Object.fromEntries(
          Object.entries(rawHeaders).map(([name, value]) => [name.toLowerCase(), value]),
        );
        bad429.push(...problemsOf429(body, lowered));
      }
    },
  });
  return {
    stop: running.stop,
    done: running.done.then(async (result) => {
      await Promise.all(checks);
      return {
        ...result,
        statuses,
        violations,
        checked429: statuses[429] ?? 0,
        bad429: bad429.length,
        bad429Samples: bad429.slice(0, 5),
      };
    }),
  };
}

async function activeOf(group: CapGroup): Promise<number> {
  const metrics = await t.client.get('/metrics/rate-limits');
  expect(metrics.status).toBe(200);
  expect(metrics.body[group].limit).toBe(CAPS[group]);
  return metrics.body[group].active;
}

/** `count` requests held open by their clients (headers sent, body unfinished), admitted by the service. */
function clientHolds(request: LoadRequest, group: CapGroup): ClientHolds {
  let held: HeldRequest[] = [];
  return {
    async hold(count) {
      held = Array.from({ length: count }, () =>
        holdRequest(
          t.service.url,
          request.method,
          request.path,
          request.body === undefined ? {} : JSON.parse(request.body),
        ),
      );
      const deadline = Date.now() + 5_000;
      while ((await activeOf(group)) < count && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
    },
    async release() {
      const answers = await Promise.all(held.map((request) => request.release()));
      return answers.map((answer) => answer.status);
    },
  };
}

async function overload(
  group: CapGroup,
  options: { request: LoadRequest; heldBy: 'target' | 'client'; holders?: LoadRequest },
): Promise<CapsReport & { violations: string[] }> {
  const violations: string[] = [];
  const report = await runCapsScenario({
    group,
    cap: CAPS[group],
    factor: scenarios.caps.overloadFactor,
    durationS: OVERLOAD_SECONDS,
    request: options.request,
    heldBy: options.heldBy,
    target: {
      reset: () => {
        target.reset();
        return Promise.resolve();
      },
      stats: () =>
        Promise.resolve({
          arrivals: target.hold.arrivals,
          waiting: target.hold.waiting,
          maxWaiting: target.hold.maxWaiting,
        }),
      release: () => Promise.resolve(target.hold.release()),
    },
    clients: clientHolds(options.holders ?? options.request, group),
    load: (connections, durationS) => {
      const running = contractLoad(options.request, connections, { durationS });
      return {
        stop: running.stop,
        done: running.done.then((result) => {
          violations.push(...result.violations);
          return result;
        }),
      };
    },
    active: () => activeOf(group),
  });
  return { ...report, violations };
}

function expectExactCap(report: CapsReport & { violations: string[] }): void {
  expect(report.violations).toEqual([]);
  expect(report.admitted).toBe(report.cap);
  expect(report.overCap).toBe(0);
  expect(report.load.responses).toBeGreaterThan(report.concurrency);
  expect(report.notRefused).toBe(0);
  expect(report.load.byStatus['429']?.count).toBe(report.load.responses);
  expect(report.load.checked429).toBe(report.load.responses);
  expect({ bad429: report.load.bad429, samples: report.load.bad429Samples }).toEqual({ bad429: 0, samples: [] });
  expect(report.activeAfter).toBe(0);
}

describe('concurrency caps under load (3x the cap)', () => {
  it('/proxy: exactly the cap reaches a target that holds requests open; the surplus is 429 with Retry-After', async () => {
    const report = await overload('proxy', { request: requestOf('proxyHold', bindings), heldBy: 'target' });
    expectExactCap(report);
    expect(report.maxWaiting).toBe(CAPS.proxy);
    expect(report.load.byStatus['429']).toBeDefined();

    // Every slot is free again: a burst at the cap is served in full.
    const after = await contractLoad(requestOf('proxyFree', bindings), CAPS.proxy, { amount: 4 * CAPS.proxy }).done;
    expect(after.violations).toEqual([]);
    expect(after.statuses).toEqual({ 200: 4 * CAPS.proxy });
  });

  it('/relay: exactly the cap reaches a target that holds requests open; the surplus is 429 with Retry-After', async () => {
    // Without X-PAYMENT the relay calls the target first: a held call holds its slot.
    const report = await overload('relay', { request: requestOf('relayHold', bindings), heldBy: 'target' });
    expectExactCap(report);
    expect(report.maxWaiting).toBe(CAPS.relay);
  });

  it('/webhooks/{id}: with the cap held open, every request past it is 429 with Retry-After', async () => {
    const report = await overload('webhooks', { request: requestOf('webhook', bindings), heldBy: 'client' });
    expectExactCap(report);
    expect(report.heldStatuses).toEqual(Array(CAPS.webhooks).fill(404));
  });
});
