/**
 * Starts graphile-worker on its own pool (its job ids must stay strings, so it does not share our
 * pool and its bigint parsers) and reports whether it is still running.
 */
import { Logger as WorkerLogger, run, type Runner } from 'graphile-worker';
import pg from 'pg';
import type { Logger } from 'pino';
import { createTaskList, cronItems } from './index';
import type { WorkerDeps } from './deps';

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

export async function startWorker(connectionString: string, deps: WorkerDeps, concurrency = 5): Promise<WorkerHandle> {
  const log = deps.log.child({ component: 'worker' });
  const pool = new pg.Pool({ connectionString, max: concurrency + 2 });
  // A connection lost while idle (a database restart) is logged and replaced, never fatal.
  pool.on('error', (error) => log.error({ err: error }, 'worker pool error'));
  pool.on('connect', (client) => client.on('error', (error) => log.error({ err: error }, 'worker connection error')));
  const runner = await run({
    pgPool: pool,
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    taskList: createTaskList(deps),
    parsedCronItems: cronItems,
    logger: workerLogger(log),
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
    },
  };
}
