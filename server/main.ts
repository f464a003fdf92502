/**
 * `npm start`: the API with its in-process worker. `npm run worker`: the worker alone (several API
 * instances and workers can share one Postgres). SIGTERM or SIGINT stops gracefully.
 */
import { checkProductionConfig, ConfigError, loadConfig, type Config } from '../payments/basics/config';
import { isConnectionLoss } from '../db/index';
import { createLogger } from './logger';
import { SandboxUnavailableError, sandboxWanted, startSandbox, type Sandbox } from './sandbox';
import { startService, type Service } from './service';

const args = new Set(process.argv.slice(2));
const workerOnly = args.has('--worker-only');

function fail(message: string): never {
  process.stderr.write(`payment-routing-service: ${message}\n`);
  process.exit(1);
}

function configure(overrides: Record<string, string>): Config {
  try {
    const env = { ...process.env, ...overrides };
    const config = loadConfig(env);
    if (workerOnly) config.runWorker = true;
    checkProductionConfig(config, env);
    return config;
  } catch (error) {
    if (error instanceof ConfigError) fail(`configuration error: ${error.message}`);
    throw error;
  }
}

async function main(): Promise<void> {
  const { logLevel, logFormat } = configure({});
  const log = createLogger(logLevel, logFormat);
  // graphile-worker 0.17 does not await some of its own job-state writes: one that meets a
  // Postgres restart rejects with nobody listening, and Node would end the whole process (API
  // and worker) over a write the worker redoes once the job's lock expires. A lost connection is
  // logged and ridden out; any other unhandled rejection is a bug and still ends the process.
  process.on('unhandledRejection', (reason) => {
    if (isConnectionLoss(reason)) {
      log.error({ err: reason }, 'a database write was lost with its connection; continuing');
      return;
    }
    log.fatal({ err: reason }, 'unhandled rejection');
    process.exit(1);
  });
  let sandbox: Sandbox | undefined;
  let service: Service;
  try {
    if (!workerOnly && sandboxWanted(process.env)) {
      sandbox = await startSandbox({
        dataDir: process.env.DATA_DIR ?? './.data',
        reset: args.has('--reset'),
        log,
        env: process.env,
      });
    }
    const config = configure(sandbox?.env ?? {});
    // The sandbox's demo organisation, sandbox.json and banner exist before the instance is ready.
    const ready = sandbox;
    service = await startService(config, {
      logger: log,
      serveHttp: !workerOnly,
      ...(ready && { beforeReady: { name: 'sandbox', run: (url, db) => ready.ready(url, db) } }),
    });
  } catch (error) {
    if (error instanceof SandboxUnavailableError) fail(error.message);
    if (error instanceof ConfigError) {
      await sandbox?.stop().catch(() => {});
      fail(`configuration error: ${error.message}`);
    }
    log.fatal({ err: error }, 'the service could not start');
    await sandbox?.stop().catch(() => {});
    process.exit(1);
  }
  if (workerOnly) log.info('worker running (no HTTP API in this process)');
  let signalled = false;
  const shutdown = (signal: string) => {
    if (signalled) return;
    signalled = true;
    log.info({ signal }, 'shutting down');
    service
      .stop()
      .then(() => sandbox?.stop())
      .then(
        () => process.exit(0),
        (error: unknown) => {
          log.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  // The embedded Postgres (if any) is stopped last, after the requests in flight and the worker.
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

await main();
