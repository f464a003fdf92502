/**
 * `npm start`: the API with its in-process worker. `npm run worker`: the worker alone (several API
 * instances and workers can share one Postgres). SIGTERM or SIGINT stops gracefully.
 *
 * The sandbox (nothing configured) starts its three slow parts side by side: the local peers, the
 * embedded Postgres with its migrations (initdb and postgres run as processes of their own), and
 * the loading of the service's modules.
 */
import { checkProductionConfig, ConfigError, loadConfig, type Config } from '../payments/basics/config';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../db/embedded';
import { createDb, isConnectionLoss, migrateToLatest } from '../db/index';
import type { Logger } from 'pino';
import { createLogger } from './logger';
import {
  checkSandboxInstalled,
  loadSandbox,
  prepareDataDir,
  SandboxUnavailableError,
  sandboxWanted,
  type Sandbox,
  type SandboxOptions,
} from './sandbox';
import type { Service } from './service';

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

/**
 * The embedded Postgres in DATA_DIR, migrated: what startService would start, started here beside
 * the sandbox's peers. The service then finds it by its URL and its migrations applied.
 */
async function openEmbeddedDatabase(config: Config, log: Logger): Promise<EmbeddedDatabase> {
  log.info({ dataDir: config.dataDir }, 'DATABASE_URL is not set: starting the embedded Postgres');
  const embedded = await startEmbeddedPostgres({
    dataDir: config.dataDir,
    log: (message) => log.debug({ component: 'postgres' }, message),
    warn: (message) => log.warn({ component: 'postgres' }, message),
  });
  try {
    const handle = createDb(embedded.url, { maxConnections: 1 });
    try {
      const applied = await migrateToLatest(handle.db);
      if (applied.length > 0) log.info({ migrations: applied }, 'database migrated');
    } finally {
      await handle.close();
    }
  } catch (error) {
    await embedded.stop().catch(() => {});
    throw error;
  }
  return embedded;
}

interface SandboxParts {
  sandbox: Sandbox;
  /** The embedded Postgres, unless DATABASE_URL names a database. */
  database: EmbeddedDatabase | undefined;
}

/**
 * The sandbox and, without DATABASE_URL, the embedded Postgres, side by side. Nothing is started
 * or written unless the development packages are installed; `loaded` is called once the sandbox
 * has loaded. When one part fails, the other is stopped once it has started.
 */
async function startSandboxParts(
  config: Config,
  log: Logger,
  options: SandboxOptions,
  loaded: () => void,
): Promise<SandboxParts> {
  checkSandboxInstalled();
  // A reset empties the data directory before the embedded Postgres is created in it.
  prepareDataDir(options);
  const [sandbox, database] = await Promise.allSettled([
    loadSandbox().then((devnet) => {
      loaded();
      return devnet.startSandbox({ ...options, reset: false });
    }),
    config.databaseUrl ? Promise.resolve(undefined) : openEmbeddedDatabase(config, log),
  ]);
  const stop = async () => {
    if (database.status === 'fulfilled') await database.value?.stop().catch(() => {});
    if (sandbox.status === 'fulfilled') await sandbox.value.stop().catch(() => {});
  };
  if (sandbox.status === 'rejected' || database.status === 'rejected') {
    await stop();
    throw sandbox.status === 'rejected' ? sandbox.reason : (database as PromiseRejectedResult).reason;
  }
  // The demo organisation now, while nothing else runs, rather than once the service listens
  // (where its queries would wait behind the compiling of the request validators).
  try {
    const databaseUrl = database.value?.url ?? config.databaseUrl;
    if (databaseUrl === undefined) throw new Error('neither DATABASE_URL nor the embedded Postgres');
    const handle = createDb(databaseUrl, { maxConnections: 1 });
    await sandbox.value.prepare(handle.db).finally(() => handle.close());
  } catch (error) {
    await stop();
    throw error;
  }
  return { sandbox: sandbox.value, database: database.value };
}

let loadingService: Promise<typeof import('./service')> | undefined;
function loadService(): Promise<typeof import('./service')> {
  loadingService ??= import('./service');
  return loadingService;
}

async function main(): Promise<void> {
  const initial = configure({});
  const log = createLogger(initial.logLevel, initial.logFormat);
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
  let parts: SandboxParts | undefined;
  // Stopped in this order: the service (requests in flight, then the worker), the embedded
  // Postgres started beside the sandbox, the sandbox's peers.
  const stopParts = async () => {
    await parts?.database?.stop();
    await parts?.sandbox.stop();
  };
  let service: Service;
  try {
    const wantSandbox = !workerOnly && sandboxWanted(process.env);
    if (wantSandbox) {
      const options = { dataDir: process.env.DATA_DIR ?? './.data', reset: args.has('--reset'), log, env: process.env };
      // The service's modules load while the sandbox starts (once the sandbox itself has loaded).
      parts = await startSandboxParts(initial, log, options, () => {
        loadService().catch(() => {});
      });
    }
    const config = configure({
      ...parts?.sandbox.env,
      ...(parts?.database && { DATABASE_URL: parts.database.url }),
    });
    const { startService } = await loadService();
    // The sandbox's demo organisation, sandbox.json and banner exist before the instance is ready.
    const sandbox = parts?.sandbox;
    service = await startService(config, {
      logger: log,
      serveHttp: !workerOnly,
      ...(sandbox && { beforeReady: { name: 'sandbox', run: (url, db) => sandbox.ready(url, db) } }),
    });
  } catch (error) {
    if (error instanceof SandboxUnavailableError) fail(error.message);
    if (error instanceof ConfigError) {
      await stopParts().catch(() => {});
      fail(`configuration error: ${error.message}`);
    }
    log.fatal({ err: error }, 'the service could not start');
    await stopParts().catch(() => {});
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
      .then(stopParts)
      .then(
        () => process.exit(0),
        (error: unknown) => {
          log.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  // The embedded Postgres (if any) is stopped after the requests in flight and the worker.
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

await main();
