/**
 * The relay_follow job's share (db/migrations/2026_11_30_0026_relay_follow.ts): an admitted relay
 * transaction's row says when it is looked at (look_at), and one job for the service looks at
 * every open row that is due, through the same step the relay_watch job takes
 * (./finish.ts followUpRelay), a few at a time, and writes each row's next look (none once the
 * step is done). A row that moves on (delivered, failed, refunding) is no longer due; a look that
 * repeats another does nothing more, as every move is a guarded update.
 */
import { sql } from 'kysely';
import type { Db } from '../../../db/index';
import type { Deps } from '../../deps';
import { addJob, type JobName } from '../../basics/jobs';
import { followUpRelay } from './finish';

/** The key (and queue, and task) of the one follow job of the service. */
export const RELAY_FOLLOW_KEY = 'relay_follow' satisfies JobName;
/** Rows looked at per run; a run that found a full batch runs again at once. */
export const RELAY_FOLLOW_BATCH = 100;
/** Rows followed at the same time within a run. */
const FOLLOW_CONCURRENCY = 4;
/** A look that failed is tried again this much later. */
const FAILED_LOOK_RETRY_MS = 15_000;
/** A row's look may be this late before the sweep queues the follow job again. */
export const RELAY_LOOK_GRACE_MS = 10_000;

/** The states a row is followed in (the index relay_transactions_due holds only these). */
const OPEN_STATES = ['received', 'settling', 'settled'] as const;

type FollowDeps = Parameters<typeof followUpRelay>[1] & Pick<Deps, 'log'>;

/**
 * One run: every open row whose look is due, oldest look first, up to RELAY_FOLLOW_BATCH, each
 * followed once; each gets its next look (null once done). Returns when the next row is due, or
 * undefined when none is followed.
 */
export async function followDueRelayTransactions(deps: FollowDeps): Promise<Date | undefined> {
  const { db } = deps;
  const due = await db
    .selectFrom('relay_transactions')
    .select('id')
    .where('look_at', 'is not', null)
    .where('state', 'in', OPEN_STATES)
    .where('look_at', '<=', sql<Date>`now()`)
    .orderBy('look_at')
    .limit(RELAY_FOLLOW_BATCH)
    .execute();
  const next: Array<[bigint, Date | null]> = [];
  const queue = due.map((row) => row.id);
  const followEach = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      try {
        const result = await followUpRelay(id, deps);
        next.push([id, result.kind === 'done' ? null : result.lookAgainAt]);
        if (result.kind === 'done')
          deps.log.info(
            { task: RELAY_FOLLOW_KEY, relayTransactionId: String(id), details: result.details },
            'relay transaction followed up',
          );
      } catch (error) {
        deps.log.error(
          { err: error, relayTransactionId: String(id) },
          'relay follow: the look failed; will look again',
        );
        next.push([id, new Date(deps.clock.now().getTime() + FAILED_LOOK_RETRY_MS)]);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(FOLLOW_CONCURRENCY, queue.length) }, followEach));
  if (next.length > 0)
    await sql`
      update relay_transactions t set look_at = v.at
      from unnest(${next.map(([id]) => String(id))}::bigint[], ${next.map(([, at]) => at?.toISOString() ?? null)}::timestamptz[]) as v(id, at)
      where t.id = v.id`.execute(db);
  if (due.length >= RELAY_FOLLOW_BATCH) return deps.clock.now();
  const soonest = await db
    .selectFrom('relay_transactions')
    .select((eb) => eb.fn.min<Date>('look_at').as('at'))
    .where('look_at', 'is not', null)
    .where('state', 'in', OPEN_STATES)
    .executeTakeFirst();
  return soonest?.at ?? undefined;
}

/**
 * Queues the follow job at `runAt` (at once without it) unless one waits to run by then (not yet
 * taken by a worker): that one sees every row due when it runs.
 */
export async function queueRelayFollow(db: Db, runAt?: Date): Promise<void> {
  const at = runAt ?? new Date(0);
  const { rows } = await sql<{ waiting: boolean }>`
    select exists (
      select 1 from graphile_worker.jobs
        where key = ${RELAY_FOLLOW_KEY} and locked_at is null and run_at <= greatest(${at.toISOString()}::timestamptz, now())
    ) as waiting`.execute(db);
  if (rows[0]?.waiting === true) return;
  await addJob(db, { task: RELAY_FOLLOW_KEY, payload: {}, key: RELAY_FOLLOW_KEY, queue: RELAY_FOLLOW_KEY, runAt: at });
}

/** Whether an open row is past its look by more than RELAY_LOOK_GRACE_MS (by the database's clock). */
export async function lateRelayLook(db: Db): Promise<boolean> {
  const late = await db
    .selectFrom('relay_transactions')
    .select('id')
    .where('look_at', 'is not', null)
    .where('state', 'in', OPEN_STATES)
    .where('look_at', '<', sql<Date>`now() - ${`${RELAY_LOOK_GRACE_MS} milliseconds`}::interval`)
    .limit(1)
    .executeTakeFirst();
  return late !== undefined;
}
