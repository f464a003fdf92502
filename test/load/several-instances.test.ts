// Two API instances (RUN_WORKER=false) and one worker, child processes of `server/main.ts` on one
// Postgres, behind the runner's round robin (load/runner/instances.ts, roundRobin.ts). Through the
// balancer: each instance's /proxy cap holds on its own (3 x its cap of clients per instance:
// exactly the cap admitted on each, the rest 429, and each instance's /metrics agrees), and paid
// calls stay exact across both (credits for exactly K calls: K paid; a key's daily cap for exactly
// L calls: L paid; ledger, balance and daily counter to the credit). Then load/several-instances.js
// plays against the same cluster under the k6 stand-in. Every answer read is checked against the
// OpenAPI document.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers, type Target } from '../../devnet/index';
import { proxyCredits } from '../../payments/accounts/fees';
import {
  capsAcrossInstances,
  capsProblems,
  paidAcrossInstances,
  paidProblems,
  seedPaidAccount,
  startCluster,
  type Cluster,
  type Exchange,
} from '../../load/runner/instances';
import { requestOf } from '../../load/runner/scenarios';
import { checkResponse } from '../support/contract';
import { playStandIn, type StandInRun, type Threshold } from '../support/k6-standin';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { ifStarted } from '../support/teardown';

const ROOT = path.resolve(import.meta.dirname, '../..');
/** Per instance; the paid runs' bursts (3 x K calls, half on each instance) stay under it. */
const CAP = 8;
const PRICE = 10_000n;
const PER_CALL = proxyCredits(PRICE, 3).totalCredits;
const CREDITS_CALLS = 4;
const LIMIT_CALLS = 3;

let peers: Peers;
let target: Target;
let database: TestDatabase;
let cluster: Cluster;
let directory: string;

beforeAll(async () => {
  mkdirSync(path.join(ROOT, '.tmp'), { recursive: true });
  directory = mkdtempSync(path.join(ROOT, '.tmp', 'load-instances-'));
  peers = await startPeers({ networks: ['base-sepolia'], holdTimeoutMs: 30_000, pricesMicroUsdc: { paid: PRICE } });
  target = peers.targets['base-sepolia']!;
  database = await createTestDatabase();
  cluster = await startCluster({
    dataDir: directory,
    databaseUrl: database.url,
    env: {
      ...peersEnv(peers),
      NODE_ENV: 'test',
      LOG_LEVEL: 'warn',
      CAP_PROXY: String(CAP),
      CAP_RELAY: String(CAP),
      CAP_WEBHOOKS: String(CAP),
    },
  });
}, 120_000);

afterAll(async () => {
  ifStarted(target)?.hold.release();
  await ifStarted(cluster)?.stop();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
  if (directory) rmSync(directory, { recursive: true, force: true });
});

/** Collects the runner's answers; each is checked against the document at the end of a test. */
function contract() {
  const exchanges: Exchange[] = [];
  return {
    observe: (exchange: Exchange) => {
      exchanges.push(exchange);
    },
    async violations(): Promise<string[]> {
      const problems: string[] = [];
      for (const exchange of exchanges) {
        const isJson = (exchange.headers.get('content-type') ?? '').startsWith('application/json');
        await checkResponse(exchange.method, exchange.path, {
          status: exchange.status,
          headers: exchange.headers,
          text: exchange.text,
          body: isJson && exchange.text ? JSON.parse(exchange.text) : exchange.text,
          operationId: undefined,
        }).catch((error: unknown) => problems.push(error instanceof Error ? error.message : String(error)));
      }
      return [...new Set(problems)].slice(0, 5);
    },
    count: () => exchanges.length,
  };
}

const holdControl = () => ({
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
});

const paidAtTarget = () =>
  Promise.resolve(target.requests.filter((request) => request.payment !== null && request.status === 200).length);

describe('two instances behind a round robin on one Postgres', () => {
  it('each instance admits exactly its cap of /proxy calls and answers 429 past it', async () => {
    const checked = contract();
    const account = await seedPaidAccount(database.handle.db, 0n, 1_000n);
    const report = await capsAcrossInstances({
      cluster,
      cap: CAP,
      factor: 3,
      durationS: 1,
      request: requestOf('proxyHold', { holdUrl: target.routes.hold.url, apiKey: account.key }),
      target: holdControl(),
      observe: checked.observe,
    });
    expect(capsProblems(report)).toEqual([]);
    expect(report.instances).toHaveLength(2);
    for (const instance of report.instances) {
      expect(instance.admitted).toBe(CAP);
      expect(instance.maxInFlight).toBe(CAP);
      expect(instance.refused).toBeGreaterThan(0);
      expect(instance.serverRefused).toBe(instance.refused);
    }
    expect(report.maxWaitingAtTarget).toBe(2 * CAP);
    expect(await checked.violations()).toEqual([]);
  });

  it(`credits for exactly ${CREDITS_CALLS} calls: ${3 * CREDITS_CALLS} at once across both, exactly ${CREDITS_CALLS} paid`, async () => {
    const checked = contract();
    const account = await seedPaidAccount(database.handle.db, BigInt(CREDITS_CALLS) * PER_CALL, 100_000n);
    const report = await paidAcrossInstances({
      cluster,
      db: database.handle.db,
      kind: 'credits',
      account,
      allowed: CREDITS_CALLS,
      calls: 3 * CREDITS_CALLS,
      creditsPerCall: PER_CALL,
      dailyCap: 100_000n,
      paidUrl: target.routes.paid.url,
      paidAtTarget,
      observe: checked.observe,
    });
    expect(paidProblems(report)).toEqual([]);
    expect(report.balanceAfter).toBe(0n);
    // Both instances took calls.
    expect(Object.keys(report.byInstance)).toHaveLength(2);
    expect(await checked.violations()).toEqual([]);
  });

  it(`a daily cap for exactly ${LIMIT_CALLS} calls: ${3 * LIMIT_CALLS} at once across both, exactly ${LIMIT_CALLS} paid`, async () => {
    const checked = contract();
    const cap = BigInt(LIMIT_CALLS) * PER_CALL;
    const account = await seedPaidAccount(database.handle.db, 10n * cap, cap);
    const report = await paidAcrossInstances({
      cluster,
      db: database.handle.db,
      kind: 'limit',
      account,
      allowed: LIMIT_CALLS,
      calls: 3 * LIMIT_CALLS,
      creditsPerCall: PER_CALL,
      dailyCap: cap,
      paidUrl: target.routes.paid.url,
      paidAtTarget,
      observe: checked.observe,
    });
    expect(paidProblems(report)).toEqual([]);
    expect(report.keySpent).toBe(cap);
    expect(await checked.violations()).toEqual([]);
  });
});

async function play(plays: string[], env: Record<string, string>): Promise<StandInRun> {
  return playStandIn({
    script: 'load/several-instances.js',
    plays,
    directory,
    env: {
      BASE_URL: cluster.balancer.url,
      INSTANCE_URLS: cluster.instances.map((instance) => instance.url).join(','),
      TARGET_URL: target.url,
      CAP_PROXY: String(CAP),
      ...env,
    },
    timeoutMs: 90_000,
  });
}

function thresholdsWith(run: StandInRun, result: Threshold['result']): string[] {
  return Object.entries(run.thresholds).flatMap(([selector, entries]) =>
    entries.filter((entry) => entry.result === result).map((entry) => `${selector} ${entry.expression}`),
  );
}

const sum = (run: StandInRun, prefix: string) =>
  Object.entries(run.metrics)
    .filter(([key]) => key.startsWith(prefix))
    .reduce((total, [, metric]) => total + metric.sum, 0);

describe('load/several-instances.js under the k6 stand-in, through the balancer', () => {
  it('caps: with both instances full, every call is 429 from both, and no /metrics shows more than the cap', async () => {
    target.reset();
    const account = await seedPaidAccount(database.handle.db, 0n, 1_000n);
    const call = { api_url: target.routes.hold.url, method: 'GET' };
    const held = Array.from({ length: 2 * CAP }, () =>
      fetch(`${cluster.balancer.url}/proxy`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': account.key },
        body: JSON.stringify(call),
      }).then((response) => response.status),
    );
    await target.hold.waitForWaiting(2 * CAP, 10_000);
    const run = await play(['caps:6', 'observer:2'], { ONLY: 'caps', API_KEY: account.key, PAUSE: '0' });
    target.hold.release();
    expect(await Promise.all(held)).toEqual(Array(2 * CAP).fill(200));
    expect(Object.entries(run.checks).filter(([, counts]) => counts.fails > 0)).toEqual([]);
    expect(run.metrics['refused{"scenario":"caps","instance":"1"}']?.sum).toBe(3);
    expect(run.metrics['refused{"scenario":"caps","instance":"2"}']?.sum).toBe(3);
    expect(thresholdsWith(run, 'fail')).toEqual([]);
    // Each instance's own count of its 429s (teardown), and its in-flight gauge at its cap.
    expect(run.thresholds['server_refused{instance:1}']).toEqual([{ expression: 'count>0', value: 3, result: 'pass' }]);
    expect(run.thresholds['server_refused{instance:2}']).toEqual([{ expression: 'count>0', value: 3, result: 'pass' }]);
    expect(run.thresholds['instance_in_flight{instance:1}']).toEqual([
      { expression: `max<=${CAP}`, value: CAP, result: 'pass' },
    ]);
    expect(run.thresholds.instance_over_cap).toEqual([{ expression: 'count==0', value: 0, result: 'pass' }]);
  });

  it('credits and limit: exactly the affordable calls are paid, the rest refused, balances and counters exact', async () => {
    const db = database.handle.db;
    const credits = await seedPaidAccount(db, 2n * PER_CALL, 100_000n);
    const limit = await seedPaidAccount(db, 100n * PER_CALL, 2n * PER_CALL);
    const run = await play(['credits:6', 'limit:6'], {
      ONLY: 'credits,limit',
      CREDITS_KEY: credits.key,
      CREDITS_CALLS: '2',
      LIMIT_KEY: limit.key,
      LIMIT_CALLS: '2',
      CALL_CREDITS: String(PER_CALL),
    });
    expect(thresholdsWith(run, 'fail')).toEqual([]);
    expect(thresholdsWith(run, 'no data')).toEqual([]);
    expect(sum(run, 'credits_paid')).toBe(2);
    expect(sum(run, 'credits_refused')).toBe(4);
    expect(sum(run, 'limit_paid')).toBe(2);
    expect(sum(run, 'limit_refused')).toBe(4);
    expect(sum(run, 'server_paid')).toBe(4);
    // The calls went to both instances.
    expect(sum(run, 'credits_paid{"scenario":"credits","instance":"1"}')).toBe(1);
    expect(sum(run, 'credits_paid{"scenario":"credits","instance":"2"}')).toBe(1);
  });

  it('setup stops the run when CREDITS_CALLS does not match the balance', async () => {
    const credits = await seedPaidAccount(database.handle.db, 5n * PER_CALL, 100_000n);
    await expect(
      play([], { ONLY: 'credits', CREDITS_KEY: credits.key, CREDITS_CALLS: '4', CALL_CREDITS: String(PER_CALL) }),
    ).rejects.toThrow('-e CREDITS_CALLS=5');
  });
});
