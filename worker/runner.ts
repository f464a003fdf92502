/**
 * Starts graphile-worker on its own pool (its job ids must stay strings, so it does not share our
 * pool and its bigint parsers) and reports whether it is still running, and how each job ended.
 */
import { EventEmitter } from 'node:events';
import { Logger as WorkerLogger, run, type Runner, type WorkerEvents } from 'graphile-worker';
import pg from 'pg';
import type { Logger } from 'pino';
import { createTaskList, cronItems } from './index';
import type { WorkerDeps } from './deps';
import type { LossObserver } from '../payments/tracking/finality';
import { trackConnections } from '../db/index';

export interface WorkerHandle {
  runner: Runner;
  isRunning(): boolean;
  stop(): Promise<void>;
}

function workerLogger(log: Logger): WorkerLogger {
  return new WorkerLogger((scope) => (level, message, meta) => {
    // LogLevel is a const enum, which isolatedModules cannot read: its values are compared as the strings they are.
    const name: string = level;
    const method = name === 'error' ? 'error' : name === 'warning' ? 'warn' : name === 'debug' ? 'debug' : 'info';
    log[method]({ worker: scope, ...(meta ?? {}) }, message);
  });
}

/** How a job attempt ended: success; error (it failed and will be tried again); failed (its last attempt failed). */
export type JobOutcome = 'success' | 'error' | 'failed';

export interface WorkerOptions {
  concurrency?: number;
  /** Told of every job attempt's end, by task name (the service's metrics). */
  onJob?: (task: string, outcome: JobOutcome) => void;
  /** Told of every payment found lost to a reorg (the service's metrics). */
  onPaymentLost?: LossObserver;
}

/** graphile-worker's events, turned into one call per attempt: `failed` replaces `error` on the last attempt. */
function jobEvents(onJob: (task: string, outcome: JobOutcome) => void): WorkerEvents {
  const events = new EventEmitter() as WorkerEvents;
  events.on('job:success', ({ job }) => onJob(job.task_identifier, 'success'));
  events.on('job:error', ({ job }) => {
    // job:failed follows job:error on the last attempt: that one is counted there.
    if (job.attempts < job.max_attempts) onJob(job.task_identifier, 'error');
  });
  events.on('job:failed', ({ job }) => onJob(job.task_identifier, 'failed'));
  return events;
}

export async function startWorker(
  connectionString: string,
  deps: WorkerDeps,
  { concurrency = 5, onJob, onPaymentLost }: WorkerOptions = {},
): Promise<WorkerHandle> {
  const log = deps.log.child({ component: 'worker' });
  const pool = new pg.Pool({ connectionString, max: concurrency + 2 });
  const allClosed = trackConnections(pool);
  // A connection lost while idle (a database restart) is logged and replaced, never fatal.
  pool.on('error', (error) => log.error({ err: error }, 'worker pool error'));
  pool.on('connect', (client) => client.on('error', (error) => log.error({ err: error }, 'worker connection error')));
  const runner = await run({
    pgPool: pool,
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    // One fetch of jobs for the whole pool (the local queue), not one per job it can run at once:
    // each idle worker polled on its own, five queries a second (about 2.8 ms of the database's CPU
    // a second with nothing to do, against 0.6 for one). A new job's notification still fetches at
    // once; jobs are handed to workers as they free up and go back to the table when the pool stops.
    preset: { worker: { localQueue: { size: concurrency } } },
    taskList: createTaskList(deps, onPaymentLost ? { onPaymentLost } : {}),
    parsedCronItems: cronItems,
    logger: workerLogger(log),
    ...(onJob ? { events: jobEvents(onJob) } : {}),
  });
  let running = true;
  runner.promise.then(
    () => {
      running = false;
    },
    (error: unknown) => {
      running = false;
      log.error({ err: error }, 'worker stopped with an error');
    },
  );
  return {
    runner,
    isRunning: () => running,
    async stop() {
      if (running) {
        await runner.stop();
        await runner.promise.catch(() => {});
        running = false;
      }
      if (!pool.ended) await pool.end();
      await allClosed();
    },
  };
}
