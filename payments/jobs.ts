/**
 * Enqueuing a worker job from the money domain: graphile_worker.add_job in the caller's
 * transaction, so the job exists exactly when the state change that asks for it is committed. The
 * job key keeps one job per subject; a task reads its row again and does nothing when nothing is
 * left to do, so an extra run is harmless.
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../db/index';

export interface JobRequest {
  task: string;
  payload: Record<string, string>;
  /** One queued job per key: a second enqueue replaces (or, with keepSchedule, keeps) the first. */
  key: string;
  /** Not before this instant (by the database's clock at the earliest: now). */
  runAt?: Date;
  /** Leave a queued job's time alone (a sweeper only makes sure a job exists). */
  keepSchedule?: boolean;
  maxAttempts?: number;
}

/** How many times a job is tried when its request names no other count. */
export const DEFAULT_MAX_ATTEMPTS = 25;

export async function addJob(db: Db | Tx, job: JobRequest): Promise<void> {
  await sql`
    select graphile_worker.add_job(
      identifier => ${job.task}::text,
      payload => ${JSON.stringify(job.payload)}::json,
      run_at => greatest(${(job.runAt ?? new Date(0)).toISOString()}::timestamptz, now()),
      max_attempts => ${job.maxAttempts ?? DEFAULT_MAX_ATTEMPTS}::int,
      job_key => ${job.key}::text,
      job_key_mode => ${job.keepSchedule ? 'preserve_run_at' : 'replace'}::text
    )`.execute(db);
}
