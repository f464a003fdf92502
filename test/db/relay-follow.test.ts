// Open relay transactions are followed by one relay_follow job: the admitted row says when it is
// looked at, the job looks at every open row that is due (finishing what it can, writing the next
// look of the rest) and queues itself for the next; the minute's relay_sweep queues it again
// whenever an open row is late for its look, so no admitted payment is left unfollowed.
import { sql } from 'kysely';
import pino from 'pino';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { loadConfig } from '../../payments/basics/config';
import { systemClock } from '../../payments/basics/clock';
import { findRelayTransaction } from '../../payments/incoming/store';
import { admitClientPayment } from '../../payments/operations/relay/admit';
import { RELAY_FOLLOW_KEY } from '../../payments/operations/relay/follow';
import { relayFollow } from '../../worker/tasks/relayFollow';
import { relaySweep } from '../../worker/tasks/relaySweep';
import type { WorkerDeps } from '../../worker/deps';
import { useTestDatabase } from '../support/database';
import { verifiedPayment } from '../support/verified-payment';

const ABANDONED_AFTER_MS = 120_000;
const LIMITS = { perWalletMicro: 100_000_000n, systemMicro: 1_000_000_000n };

const database = useTestDatabase();
let db: Db;
let deps: WorkerDeps;

beforeAll(() => {
  db = database();
  deps = {
    db,
    config: loadConfig({
      NETWORKS: 'base-sepolia',
      LOG_LEVEL: 'silent',
      RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS),
    }),
    clock: systemClock,
    log: pino({ level: 'silent' }),
  } as unknown as WorkerDeps;
});

beforeEach(async () => {
  await sql`select graphile_worker.remove_job(${RELAY_FOLLOW_KEY})`.execute(db);
  await db.updateTable('relay_transactions').set({ look_at: null }).execute();
});

async function followJobs() {
  const { rows } = await sql<{ key: string; queue_name: string; run_at: Date }>`
    select key, queue_name, run_at from graphile_worker.jobs where task_identifier = ${RELAY_FOLLOW_KEY}`.execute(db);
  return rows;
}

async function admit(finishBy: Date): Promise<bigint> {
  const admitted = await admitClientPayment(
    db,
    verifiedPayment(),
    { spendDay: '2031-02-01', mode: 'relay' },
    { ...LIMITS, finishBy },
  );
  if (!admitted.ok) throw new Error(admitted.reason);
  return admitted.value.id;
}

/** The task as a worker runs the job it took (taken: no longer waiting in the queue). */
async function runTaken(task: unknown) {
  await sql`select graphile_worker.remove_job(${RELAY_FOLLOW_KEY})`.execute(db);
  await run(task);
}

const run = (task: unknown) => (task as (payload: unknown, helpers: unknown) => Promise<void>)({}, {});

describe('the relay follow job', () => {
  it('finishes each due row it can, writes the next look of the others, leaves rows not due, and queues itself for the next', async () => {
    const gone = await admit(new Date());
    const active = await admit(new Date());
    const later = await admit(new Date(Date.now() + 60_000));
    // The request that admitted `gone` has answered its client: nothing will settle it now.
    await db.updateTable('relay_transactions').set({ responded_at: new Date() }).where('id', '=', gone).execute();

    await runTaken(relayFollow(deps));

    expect(await findRelayTransaction(db, gone)).toMatchObject({
      state: 'settle_failed',
      failure_reason: 'abandoned',
      look_at: null,
    });
    // Its request may still act: looked at again once it is presumed gone.
    const stillOpen = await findRelayTransaction(db, active);
    expect(stillOpen?.state).toBe('received');
    expect(stillOpen?.look_at?.getTime()).toBe(stillOpen!.created_at.getTime() + ABANDONED_AFTER_MS);
    const notDue = await findRelayTransaction(db, later);
    expect(notDue?.state).toBe('received');
    const jobs = await followJobs();
    expect(jobs).toEqual([{ key: RELAY_FOLLOW_KEY, queue_name: RELAY_FOLLOW_KEY, run_at: notDue!.look_at }]);
  });

  it('is queued again by the sweep once an open row is past its look by more than the grace, not before', async () => {
    const id = await admit(new Date(Date.now() + 60_000));
    await sql`select graphile_worker.remove_job(${RELAY_FOLLOW_KEY})`.execute(db);
    // Due, but within the grace: the job that looks at it may be running now.
    await db
      .updateTable('relay_transactions')
      .set({ look_at: sql<Date>`now() - interval '5 seconds'` })
      .where('id', '=', id)
      .execute();
    await run(relaySweep(deps));
    expect(await followJobs()).toEqual([]);
    await db
      .updateTable('relay_transactions')
      .set({ look_at: sql<Date>`now() - interval '30 seconds'` })
      .where('id', '=', id)
      .execute();
    await run(relaySweep(deps));
    expect(await followJobs()).toMatchObject([{ key: RELAY_FOLLOW_KEY, queue_name: RELAY_FOLLOW_KEY }]);
  });

  it('does not look at a row once it moved on (delivered, failed, refunding)', async () => {
    const id = await admit(new Date());
    await db.updateTable('relay_transactions').set({ state: 'settle_failed' }).where('id', '=', id).execute();
    await runTaken(relayFollow(deps));
    expect(await findRelayTransaction(db, id)).toMatchObject({ state: 'settle_failed', failure_reason: null });
    expect(await followJobs()).toEqual([]);
  });
});
