/**
 * Enqueuing a worker job from the money domain: graphile_worker.add_job in the caller's
 * transaction, so the job exists exactly when the state change that asks for it is committed. The
 * job key keeps one job per subject; a task reads its row again and does nothing when nothing is
 * left to do, so an extra run is harmless.
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../../db/index';

/** What graphile-worker gives a task run by its crontab. */
export interface CronPayload {
  _cron?: { ts: string; backfilled?: boolean };
}

/**
 * The worker's tasks, each name defined here once with its payload: ids as decimal strings, the
 * task reads its row again. worker/ registers one task for each name (its task list is checked
 * against this catalog) and declares it as graphile-worker's GraphileWorker.Tasks, so a task's
 * payload and the job enqueued for it are one type.
 */
export interface JobPayloads {
  relay_watch: { relayTransactionId: string };
  relay_refund: { relayTransactionId: string };
  relay_follow: Record<string, never>;
  relay_sweep: CronPayload;
  proxy_payment_watch: { proxyPaymentId: string };
  proxy_payment_sweep: CronPayload;
  chat_follow_up: CronPayload;
  credit_purchase_watch: { creditPurchaseId: string };
  day_rollover: CronPayload;
  idempotency_prune: CronPayload;
  finality_watch: { watchId: string };
  finality_follow: Record<string, never>;
  finality_sweep: CronPayload;
  /** `force`: claim whatever is claimable now (an operator, a test), not only on the threshold or period. */
  channel_claims: CronPayload & { force?: boolean };
  float_refresh: Record<string, never>;
  payer_channel_idle: CronPayload;
}

export type JobName = keyof JobPayloads;

export interface JobRequest<N extends JobName = JobName> {
  task: N;
  payload: JobPayloads[N];
  /** One queued job per key: a second enqueue replaces (or, with keepSchedule, keeps) the first. */
  key: string;
  /** Not before this instant (by the database's clock at the earliest: now). */
  runAt?: Date;
  /** Leave a queued job's time alone (a sweeper only makes sure a job exists). */
  keepSchedule?: boolean;
  maxAttempts?: number;
  /** A named queue runs its jobs one at a time, across every worker. */
  queue?: string;
}

/** How many times a job is tried when its request names no other count. */
export const DEFAULT_MAX_ATTEMPTS = 25;

export async function addJob<N extends JobName>(db: Db | Tx, job: JobRequest<N>): Promise<void> {
  await sql`
    select graphile_worker.add_job(
      identifier => ${job.task}::text,
      payload => ${JSON.stringify(job.payload)}::json,
      queue_name => ${job.queue ?? null}::text,
      run_at => greatest(${(job.runAt ?? new Date(0)).toISOString()}::timestamptz, now()),
      max_attempts => ${job.maxAttempts ?? DEFAULT_MAX_ATTEMPTS}::int,
      job_key => ${job.key}::text,
      job_key_mode => ${job.keepSchedule ? 'preserve_run_at' : 'replace'}::text
    )`.execute(db);
}
