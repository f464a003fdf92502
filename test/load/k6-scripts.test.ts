// The k6 scripts of load/ (k6 cannot be installed here), played a few iterations at a time under
// the stand-in of load/runner/k6-standin against the service and a local x402 target: their
// requests, checks, metrics and thresholds. Every answer they get is checked against the OpenAPI
// document.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers, type Target } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { playStandIn, type StandInRun, type Threshold } from '../support/k6-standin';
import { holdRequest, type HeldRequest } from '../support/held-request';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const CAP = 2;
const ROOT = path.resolve(import.meta.dirname, '../..');

let peers: Peers;
let target: Target;
let t: TestService;
let directory: string;
let sandboxFile: string;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], holdTimeoutMs: 30_000 });
  target = peers.targets['base-sepolia']!;
  // Targets are named by address: the test resolver never needs to resolve a name.
  t = await startProxyService(peers, { CAP_PROXY: String(CAP), CAP_RELAY: String(CAP), CAP_WEBHOOKS: String(CAP) });
  const account = await createTestAccount(t.database.handle.db, { credits: 10_000n });
  mkdirSync(path.join(ROOT, '.tmp'), { recursive: true });
  directory = mkdtempSync(path.join(ROOT, '.tmp', 'load-k6-'));
  // What the sandbox of `npm start` writes, as far as the scripts read it.
  sandboxFile = path.join(directory, 'sandbox.json');
  writeFileSync(
    sandboxFile,
    JSON.stringify({ baseUrl: t.service.url, apiKey: account.key, targets: { 'base-sepolia': target.url } }),
  );
});

afterAll(async () => {
  ifStarted(target)?.hold.release();
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
  if (directory) rmSync(directory, { recursive: true, force: true });
});

/** Plays `plays` (scenario:iterations) of a script under the stand-in; checks every answer it got against the document. */
function play(script: string, plays: string[], env: Record<string, string> = {}): Promise<StandInRun> {
  // Only the sandbox file says where things are.
  return playStandIn({ script, plays, directory, env: { SANDBOX: sandboxFile, ...env }, timeoutMs: 60_000 });
}

/**
 * The scripts' latency thresholds are for load testers on a quiet machine; here the suite shares
 * two cores with other files, so they are set far out of reach of scheduling noise. What is
 * checked is that every threshold is evaluated and passes on the answers' correctness.
 */
const LATENCY_BOUNDS = { P99_MS_CONFIG: '15000', P99_MS_FREE: '15000', P99_MS_PAID: '30000', P99_MS: '15000' };

function failedChecks(run: StandInRun): string[] {
  return Object.entries(run.checks)
    .filter(([, counts]) => counts.fails > 0)
    .map(([name]) => name);
}

function thresholdsWith(run: StandInRun, result: Threshold['result']): string[] {
  return Object.entries(run.thresholds).flatMap(([selector, entries]) =>
    entries.filter((entry) => entry.result === result).map((entry) => `${selector} ${entry.expression}`),
  );
}

function count(run: StandInRun, key: string): number {
  return run.metrics[key]?.sum ?? 0;
}

async function activeOf(group: 'proxy' | 'relay' | 'webhooks'): Promise<number> {
  return (await t.client.get('/metrics/rate-limits')).body[group].active;
}

async function waitForActive(group: 'proxy' | 'relay' | 'webhooks', expected: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  while ((await activeOf(group)) !== expected && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 10));
  expect(await activeOf(group)).toBe(expected);
}

describe('the k6 scripts under a k6 stand-in', () => {
  it('throughput.js: /config, pass-through and paid /proxy answer 200 and meet their thresholds', async () => {
    const run = await play('load/throughput.js', ['config:2', 'proxyFree:2', 'proxyPaid:1'], LATENCY_BOUNDS);
    expect(thresholdsWith(run, 'pass')).toEqual(
      expect.arrayContaining(['http_req_duration{scenario:config} p(99)<15000']),
    );
    expect(failedChecks(run)).toEqual([]);
    expect(run.checks['status is 200']).toEqual({ passes: 5, fails: 0 });
    expect(thresholdsWith(run, 'fail')).toEqual([]);
    expect(thresholdsWith(run, 'no data')).toEqual([]);
    // At the end the script read the service's own count of 429s: none under the caps.
    for (const group of ['proxy', 'relay', 'webhooks'])
      expect(count(run, `server_refused{"group":"${group}"}`)).toBe(0);
  });

  it('soak.js: the mix answers as expected and meets its thresholds', async () => {
    const run = await play('load/soak.js', ['soak:12'], LATENCY_BOUNDS);
    expect(failedChecks(run)).toEqual([]);
    const requests = Object.entries(run.metrics)
      .filter(([key]) => key.startsWith('http_reqs') && key.includes('"scenario":"soak"'))
      .reduce((sum, [, metric]) => sum + metric.count, 0);
    expect(requests).toBe(12);
    // Besides the mix: GET /metrics at setup and at teardown, for the service's count of 429s.
    expect(run.metrics['http_reqs{"request":"metrics"}']?.count).toBe(2);
    expect(thresholdsWith(run, 'fail')).toEqual([]);
  });

  it('caps.js: with every cap full, each group answers 429 with Retry-After and the documented body; nothing shows over a cap', async () => {
    target.reset();
    // /proxy and /relay held where the script holds them, at the target; /webhooks by its clients.
    const apiKey = JSON.parse(readFileSync(sandboxFile, 'utf8')).apiKey as string;
    const call = { api_url: target.routes.hold.url, method: 'GET' };
    const atTarget = [
      ...Array.from({ length: CAP }, () => t.client.post('/proxy', call, { headers: { 'x-api-key': apiKey } })),
      ...Array.from({ length: CAP }, () => t.client.post('/relay', call)),
    ];
    await target.hold.waitForWaiting(2 * CAP, 5_000);
    const held: HeldRequest[] = Array.from({ length: CAP }, () =>
      holdRequest(t.service.url, 'GET', '/webhooks/6f1c1f4e-0000-4000-8000-00000000cafe', {}),
    );
    await waitForActive('proxy', CAP);
    await waitForActive('relay', CAP);
    await waitForActive('webhooks', CAP);

    const env = { CAP_PROXY: String(CAP), CAP_RELAY: String(CAP), CAP_WEBHOOKS: String(CAP), PAUSE: '0' };
    const run = await play('load/caps.js', ['proxy:3', 'relay:3', 'webhooks:3', 'observer:2'], env);
    expect(failedChecks(run)).toEqual([]);
    expect(count(run, 'refused{"scenario":"proxy","group":"proxy"}')).toBe(3);
    expect(count(run, 'refused{"scenario":"relay","group":"relay"}')).toBe(3);
    expect(count(run, 'refused{"scenario":"webhooks","group":"webhooks"}')).toBe(3);
    // The service's own count of the 429s (GET /metrics at setup and teardown) is the clients'.
    expect(count(run, 'server_refused{"group":"proxy"}')).toBe(3);
    expect(count(run, 'server_refused{"group":"relay"}')).toBe(3);
    expect(count(run, 'server_refused{"group":"webhooks"}')).toBe(3);
    expect(run.checks['429 carries Retry-After (whole seconds)']).toEqual({ passes: 9, fails: 0 });
    expect(thresholdsWith(run, 'fail')).toEqual([]);
    expect(run.thresholds['checks{kind:cap_429}']).toEqual([{ expression: 'rate==1', value: 1, result: 'pass' }]);
    expect(run.thresholds.cap_over_limit).toEqual([{ expression: 'count==0', value: 0, result: 'pass' }]);

    for (const request of held) expect((await request.release()).status).toBe(404);
    target.hold.release();
    for (const response of await Promise.all(atTarget)) expect(response.status).toBe(200);
    await waitForActive('proxy', 0);
    await waitForActive('relay', 0);
  });

  it('caps.js: a /proxy request the service admits is held at the target and counted as admitted', async () => {
    target.reset();
    const env = { CAP_PROXY: String(CAP), CAP_RELAY: String(CAP), CAP_WEBHOOKS: String(CAP), GROUPS: 'proxy' };
    const running = play('load/caps.js', ['proxy:1'], env);
    await target.hold.waitForWaiting(1, 10_000);
    target.hold.release();
    const run = await running;
    expect(count(run, 'admitted_held{"scenario":"proxy","group":"proxy"}')).toBe(1);
    expect(run.thresholds['admitted_held{group:proxy}']).toEqual([
      { expression: `count<=${CAP}`, value: 1, result: 'pass' },
    ]);
  });

  it('caps.js: setup stops the run when the caps it is told differ from the service', async () => {
    await expect(play('load/caps.js', [], { GROUPS: 'proxy' })).rejects.toThrow(`run with -e CAP_PROXY=${CAP}`);
  });
});
