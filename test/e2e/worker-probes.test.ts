// `npm run worker` (server/main.ts --worker-only) with WORKER_PORT: a small HTTP server answers
// GET /health/live, GET /health/ready (database, its worker, every enabled chain's RPC) and
// GET /metrics (the jobs it ran, by task and outcome). In-process for the details; once as the
// real command in a child process. The chains are a JSON-RPC stand-in on 127.0.0.1.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { growth, sample } from '../support/metrics';
import { startRpcStandIn, type RpcStandIn } from '../support/rpc-stand-in';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

let rpc: RpcStandIn;
beforeAll(async () => {
  rpc = await startRpcStandIn();
});
afterAll(async () => {
  await ifStarted(rpc)?.stop();
});

function env(): Record<string, string> {
  return {
    NETWORKS: 'base-sepolia,solana-devnet',
    RPC_URL_BASE_SEPOLIA: rpc.url,
    RPC_URL_SOLANA_DEVNET: rpc.url,
    WORKER_PORT: '0',
  };
}

async function get(url: string): Promise<{ status: number; type: string; text: string; body: any }> {
  const response = await fetch(url);
  const text = await response.text();
  const type = response.headers.get('content-type') ?? '';
  return { status: response.status, type, text, body: type.startsWith('application/json') ? JSON.parse(text) : text };
}

/**
 * The first answer of the status wanted, asked again every 200 ms within a bound generous for a
 * loaded machine (an event loop late now and then, a check slow to answer): probes tell of the
 * moment, and a test waits for the state it expects.
 */
async function getUntil(url: string, status: number): Promise<Awaited<ReturnType<typeof get>>> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const answer = await get(url);
    if (answer.status === status || Date.now() > deadline) return answer;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('the worker alone, in process', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService(env(), { serveHttp: false });
  });
  afterAll(async () => {
    await ifStarted(t)?.stop();
  });

  it('serves no API but the probes on WORKER_PORT', async () => {
    expect(t.service.server).toBeUndefined();
    expect(t.service.probeUrl).toMatch(/^http:\/\/127\.0\.0\.1:[0-9]+$/);
    const live = await getUntil(`${t.service.probeUrl}/health/live`, 200);
    expect(live.status).toBe(200);
    expect(live.body).toEqual({ status: 'ok', eventLoopDelayMs: expect.any(Number), maxEventLoopDelayMs: 2000 });
    const ready = await getUntil(`${t.service.probeUrl}/health/ready`, 200);
    expect(ready.status).toBe(200);
    expect(ready.body).toEqual({
      status: 'ready',
      checks: { database: 'ok', worker: 'ok', 'rpc:base-sepolia': 'ok', 'rpc:solana-devnet': 'ok' },
      failed: [],
    });
    expect((await get(`${t.service.probeUrl}/relay`)).status).toBe(404);
  });

  it('counts its jobs by task and outcome in /metrics', async () => {
    const metrics = async () => {
      const response = await get(`${t.service.probeUrl}/metrics`);
      expect(response.status).toBe(200);
      expect(response.type).toMatch(/^text\/plain; version=0\.0\.4/);
      return response.text;
    };
    const before = await metrics();
    const db = t.database.handle.db;
    await sql`select graphile_worker.add_job('day_rollover', '{}'::json)`.execute(db);
    // An invalid cron time fails the task: once with a retry left (error), then for good (failed).
    await sql`select graphile_worker.add_job('day_rollover', '{"_cron":{"ts":"not a time"}}'::json, max_attempts => 2)`.execute(
      db,
    );
    await sql`select graphile_worker.add_job('day_rollover', '{"_cron":{"ts":"not a time"}}'::json, max_attempts => 1)`.execute(
      db,
    );
    const series = (outcome: string) => `prs_jobs_total{task="day_rollover",outcome="${outcome}"}`;
    const deadline = Date.now() + 20_000;
    let after = await metrics();
    while (
      (sample(after, series('failed')) ?? 0) - (sample(before, series('failed')) ?? 0) < 2 &&
      Date.now() < deadline
    ) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      after = await metrics();
    }
    const delta = growth(before, after);
    expect(delta(series('success'))).toBe(1);
    expect(delta(series('error'))).toBe(1);
    expect(delta(series('failed'))).toBe(2);
  });

  it('answers 503 on ready once its worker has stopped', async () => {
    await t.service.worker!.stop();
    const ready = await get(`${t.service.probeUrl}/health/ready`);
    expect(ready.status).toBe(503);
    expect(ready.body.failed).toEqual(['worker']);
    expect((await getUntil(`${t.service.probeUrl}/health/live`, 200)).status).toBe(200);
  });
});

describe('npm run worker with WORKER_PORT', () => {
  let database: TestDatabase;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await ifStarted(database)?.drop();
  });

  it('serves /health/live, /health/ready and /metrics on WORKER_PORT, and stops on SIGTERM', async () => {
    const started = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts', '--worker-only'], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: { ...process.env, ...env(), DATABASE_URL: database.url, LOG_LEVEL: 'info', NODE_ENV: 'test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = started;
    const errors: string[] = [];
    started.stderr.on('data', (chunk: Buffer) => errors.push(chunk.toString()));
    const probeUrl = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the worker did not start: ${errors.join('')}`)), 60_000);
      started.once('exit', (code) => reject(new Error(`the worker exited with ${code}: ${errors.join('')}`)));
      createInterface({ input: started.stdout }).on('line', (line) => {
        try {
          const entry = JSON.parse(line) as { msg?: string; url?: string };
          if (entry.msg === 'worker probes listening' && entry.url) {
            clearTimeout(timer);
            resolve(entry.url);
          }
        } catch {
          // not a log line
        }
      });
    });
    expect((await getUntil(`${probeUrl}/health/live`, 200)).status).toBe(200);
    const ready = await getUntil(`${probeUrl}/health/ready`, 200);
    expect(ready.status).toBe(200);
    expect(ready.body.checks.worker).toBe('ok');
    const metrics = await get(`${probeUrl}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.text).toContain('# TYPE prs_jobs_total counter');

    const exited = new Promise<number | null>((resolve) => started.once('exit', (code) => resolve(code)));
    started.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
