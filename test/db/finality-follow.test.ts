// Finality watches are followed by one finality_follow job: opening a watch queues that job only
// when none waits to run by the watch's first look (one waiting for later is moved to it), and the
// minute's finality_sweep queues it again whenever a pending watch is late for its look (the job
// lost, failed for good, or waiting for later), so no watch is left unfollowed. The job runs
// before every other job (its priority).
import { sql } from 'kysely';
import pino from 'pino';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { loadConfig } from '../../payments/basics/config';
import { systemClock } from '../../payments/basics/clock';
import { FINALITY_FOLLOW_KEY, FINALITY_FOLLOW_PRIORITY, queueFinalityFollow } from '../../payments/tracking/finality';
import { finalitySweep } from '../../worker/tasks/finalitySweep';
import type { WorkerDeps } from '../../worker/deps';
import { useTestDatabase } from '../support/database';

const database = useTestDatabase();
let db: Db;

beforeAll(() => {
  db = database();
});

beforeEach(async () => {
  await sql`select graphile_worker.remove_job(${FINALITY_FOLLOW_KEY})`.execute(db);
  await db.deleteFrom('finality_watches').execute();
});

async function followJobs() {
  const { rows } = await sql<{ key: string; queue_name: string; run_at: Date; attempts: number; priority: number }>`
    select key, queue_name, run_at, attempts, priority from graphile_worker.jobs where task_identifier = 'finality_follow'`.execute(
    db,
  );
  return rows;
}

let subjects = 0;
async function openWatch() {
  subjects += 1;
  await sql`select open_finality_watch(${`test:${subjects}`}, 'refund', 'base-sepolia', null, null, null,
    ${`0x${'ab'.repeat(32)}`}, null, 10000, '{}'::jsonb)`.execute(db);
  return db
    .selectFrom('finality_watches')
    .selectAll()
    .where('subject', '=', `test:${subjects}`)
    .executeTakeFirstOrThrow();
}

function sweep() {
  const deps = {
    db,
    config: loadConfig({ NETWORKS: 'base-sepolia', LOG_LEVEL: 'silent' }),
    clock: systemClock,
    log: pino({ level: 'silent' }),
  } as unknown as WorkerDeps;
  const task = finalitySweep(deps) as (payload: unknown, helpers: unknown) => Promise<void>;
  return task({}, {});
}

describe('the finality follow job', () => {
  it('is queued by the first watch opened, a second after it, and not again while it waits', async () => {
    const first = await openWatch();
    const jobs = await followJobs();
    expect(jobs).toMatchObject([{ key: FINALITY_FOLLOW_KEY, queue_name: FINALITY_FOLLOW_KEY, attempts: 0 }]);
    expect(first.look_at.getTime()).toBeGreaterThan(first.created_at.getTime());
    await openWatch();
    await openWatch();
    expect(await followJobs()).toEqual(jobs);
  });

  it('is queued again by the sweep once a pending watch is past its look by more than the grace, not before', async () => {
    await openWatch();
    await sql`select graphile_worker.remove_job(${FINALITY_FOLLOW_KEY})`.execute(db);
    // Due, but within the grace: the job that looks at it may be running now.
    await db
      .updateTable('finality_watches')
      .set({ look_at: sql<Date>`now() - interval '5 seconds'` })
      .execute();
    await sweep();
    expect(await followJobs()).toEqual([]);
    // A minute late: its job was lost.
    await db
      .updateTable('finality_watches')
      .set({ look_at: sql<Date>`now() - interval '1 minute'` })
      .execute();
    await sweep();
    expect(await followJobs()).toMatchObject([{ key: FINALITY_FOLLOW_KEY, queue_name: FINALITY_FOLLOW_KEY }]);
  });

  it('runs before every other job', async () => {
    await openWatch();
    expect(await followJobs()).toMatchObject([{ priority: FINALITY_FOLLOW_PRIORITY }]);
    expect(FINALITY_FOLLOW_PRIORITY).toBeLessThan(0);
  });

  it("a job waiting for a later look (a quiet one, minutes away) is moved to a new watch's first look", async () => {
    await queueFinalityFollow(db, new Date(Date.now() + 10 * 60_000));
    const [waiting] = await followJobs();
    expect(waiting!.run_at.getTime()).toBeGreaterThan(Date.now() + 9 * 60_000);
    const watch = await openWatch();
    const [job] = await followJobs();
    expect(job!.run_at.getTime()).toBeLessThanOrEqual(watch.look_at.getTime() + 1_000);
    expect(job!.priority).toBe(FINALITY_FOLLOW_PRIORITY);
    // A run that asks for a later look leaves the earlier one alone.
    await queueFinalityFollow(db, new Date(Date.now() + 10 * 60_000));
    expect(await followJobs()).toEqual([job]);
  });

  it('the sweep moves a job waiting for later to now when a pending watch is late', async () => {
    await openWatch();
    await queueFinalityFollow(db, new Date(Date.now() + 10 * 60_000));
    await sql`select graphile_worker.remove_job(${FINALITY_FOLLOW_KEY})`.execute(db);
    await queueFinalityFollow(db, new Date(Date.now() + 10 * 60_000));
    await db
      .updateTable('finality_watches')
      .set({ look_at: sql<Date>`now() - interval '1 minute'` })
      .execute();
    await sweep();
    const [job] = await followJobs();
    expect(job!.run_at.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);
  });

  it('a watch no longer pending is never swept', async () => {
    await openWatch();
    await sql`select graphile_worker.remove_job(${FINALITY_FOLLOW_KEY})`.execute(db);
    await db
      .updateTable('finality_watches')
      .set({ finality: 'final', look_at: sql<Date>`now() - interval '1 hour'` })
      .execute();
    await sweep();
    expect(await followJobs()).toEqual([]);
  });
});
