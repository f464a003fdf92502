import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startTestService } from '../support/service';
import { holdRequest } from '../support/held-request';
import { contractClient } from '../support/contract';
import { loadConfig } from '../../payments/basics/config';
import { startService } from '../../server/service';
import { cronItems } from '../../worker/index';
import { createOrganisation } from '../../payments/accounts/accounts';

describe('graceful shutdown', () => {
  it('stops accepting, finishes the request in flight, then closes', async () => {
    const t = await startTestService();
    // A loopback target outside the allow list: answered 400 without any outbound call.
    const held = holdRequest(t.service.url, 'POST', '/relay/sim', { api_url: 'http://127.0.0.1:9/', method: 'GET' });
    const deadline = Date.now() + 5_000;
    while ((await t.client.get('/metrics/rate-limits')).body.relay.active !== 1) {
      if (Date.now() > deadline) throw new Error('held request never admitted');
    }
    let stopped = false;
    const stopping = t.service.stop().then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(stopped).toBe(false);
    await expect(fetch(`${t.service.url}/config`)).rejects.toThrow();
    const response = await held.release();
    expect(response.status).toBe(400);
    await stopping;
    expect(stopped).toBe(true);
    await t.database.drop();
  });

  it('cuts requests that outlast the grace period', async () => {
    const t = await startTestService({ SHUTDOWN_GRACE_MS: '200' });
    const held = holdRequest(t.service.url, 'POST', '/relay/sim', {});
    await new Promise((resolve) => setTimeout(resolve, 100));
    const startedAt = Date.now();
    await t.service.stop();
    // Without the cut it would wait for the held request, which never ends on its own.
    expect(Date.now() - startedAt).toBeLessThan(60_000);
    await expect(held.release()).rejects.toThrow();
    await t.database.drop();
  });
});

describe('worker', () => {
  it('runs the daily job in-process: the new day opens at zero', async () => {
    const t = await startTestService();
    try {
      const { db } = t.database.handle;
      await sql`select graphile_worker.add_job('day_rollover', ${JSON.stringify({ _cron: { ts: '2030-01-02T00:00:00.000Z' } })}::json)`.execute(
        db,
      );
      const deadline = Date.now() + 10_000;
      let rows: unknown[] = [];
      while (rows.length < 4 && Date.now() < deadline) {
        rows = await db.selectFrom('daily_spend').selectAll().where('day', '=', '2030-01-02').execute();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(rows).toHaveLength(4);
    } finally {
      await t.stop();
    }
  });

  it('with nothing to do, asks the database for jobs about once a second in all, not once per job it can run at once', async () => {
    const t = await startTestService();
    try {
      const { db } = t.database.handle;
      // Each fetch of jobs is a query on graphile_worker's jobs naming is_available; a backend keeps
      // its last query and when it started, so every fetch shows as a distinct (backend, start).
      const seen = new Set<string>();
      const sample = async () => {
        const { rows } = await sql<{ pid: number; started: string }>`
          select pid, query_start::text as started from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()
            and query like '%_private_jobs%' and query like '%is_available%'`.execute(db);
        return rows.map((row) => `${row.pid}@${row.started}`);
      };
      // The start's own fetches (the first poll of each worker, the cron's first jobs) are not counted.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const before = new Set(await sample());
      const seconds = 4;
      const until = Date.now() + seconds * 1000;
      while (Date.now() < until) {
        for (const fetch of await sample()) if (!before.has(fetch)) seen.add(fetch);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // The pool runs five jobs at once; polling worker by worker made five fetches a second. At
      // least one is seen (sampled every 20 ms, a short fetch can slip by on a loaded machine).
      expect(seen.size).toBeGreaterThanOrEqual(1);
      expect(seen.size).toBeLessThanOrEqual(seconds + 2);
    } finally {
      await t.stop();
    }
  });

  it('schedules the daily job at 00:00 UTC with a backfill', () => {
    const item = cronItems.find((candidate) => candidate.task === 'day_rollover')!;
    expect(item).toBeDefined();
    expect(item.match({ min: 0, hour: 0, date: 21, month: 11, dow: 6 })).toBe(true);
    expect(item.match({ min: 0, hour: 1, date: 21, month: 11, dow: 6 })).toBe(false);
    expect(item.match({ min: 30, hour: 0, date: 21, month: 11, dow: 6 })).toBe(false);
    expect(item.options.backfillPeriod).toBe(3_600_000);
  });

  it('answers /health 503 naming the worker when it has stopped', async () => {
    const t = await startTestService();
    try {
      await t.service.worker!.stop();
      const res = await t.client.get('/health');
      expect(res.status).toBe(503);
      expect(res.body.status).toBe('unavailable');
      expect(res.body.checks.database).toBe('ok');
      expect(res.body.checks.worker).toMatch(/stopped/);
    } finally {
      await t.stop();
    }
  });
});

describe('embedded Postgres', () => {
  it('starts without DATABASE_URL, migrates, serves, and keeps its data across a restart', async () => {
    const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'embedded-'));
    try {
      const config = loadConfig({ PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent' });
      expect(config.databaseUrl).toBeUndefined();
      const events = ['beforeExit', 'exit', 'SIGTERM', 'SIGINT'] as const;
      const listenersBefore = events.map((event) => process.listenerCount(event));
      const first = await startService(config, { logger: pino({ level: 'silent' }) });
      // The package's own exit hooks would turn a failing exit code into 0 and stop the database
      // ahead of a graceful shutdown: none may stay installed.
      expect(events.map((event) => process.listenerCount(event))).toEqual(listenersBefore);
      expect((await contractClient(first.url).get('/health')).status).toBe(200);
      await createOrganisation(first.dbHandle.db, 'kept');
      await first.stop();

      const second = await startService(config, { logger: pino({ level: 'silent' }) });
      try {
        const names = await second.dbHandle.db.selectFrom('organisations').select('name').execute();
        expect(names).toEqual([{ name: 'kept' }]);
        expect((await contractClient(second.url).get('/limits')).status).toBe(200);
      } finally {
        await second.stop();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
