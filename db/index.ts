import pg from 'pg';
import { Kysely, Migrator, PostgresDialect, type Transaction } from 'kysely';
import type { Database } from './schema';
import { applyDatabaseFunctions } from './functions/index';
import { migrationProvider } from './migrations';
import { namePreparedStatements } from './prepared';

export type Db = Kysely<Database>;
export type Tx = Transaction<Database>;
export type { Database } from './schema';

type TypeId = Parameters<typeof pg.types.getTypeParser>[0];

/** Type parsers for our pool only: int8 becomes bigint (money never passes through a JS number), dates stay 'YYYY-MM-DD'. */
const typeParsers: pg.CustomTypesConfig = {
  getTypeParser(oid: TypeId, format?: 'text' | 'binary'): (value: string) => unknown {
    if (oid === pg.types.builtins.INT8) return (value: string) => BigInt(value);
    if (oid === pg.types.builtins.DATE) return (value: string) => value;
    // pg-types answers `any`; every parser it holds takes the column's text.
    return pg.types.getTypeParser(oid, format) as (value: string) => unknown;
  },
};

export interface DbHandle {
  db: Db;
  pool: pg.Pool;
  close(): Promise<void>;
}

export interface DbOptions {
  maxConnections?: number;
  onPoolError?: (error: Error) => void;
}

export function createDb(connectionString: string, options: DbOptions = {}): DbHandle {
  const pool = new pg.Pool({
    connectionString,
    max: options.maxConnections ?? 20,
    types: typeParsers,
    connectionTimeoutMillis: 10_000,
    idleTimeoutMillis: 30_000,
  });
  // An idle client losing its connection must not crash the process; it is logged and replaced.
  pool.on('error', (error) => options.onPoolError?.(error));
  // Nor may a client checked out between two queries (a transaction holding the submission lock
  // while a transaction is broadcast): the pool listens only to idle clients, and an 'error' event
  // without a listener is an uncaught exception. The work on that client fails on its next query,
  // and the pool drops the client when it is released.
  pool.on('connect', (client) => {
    client.on('error', (error) => options.onPoolError?.(error));
    namePreparedStatements(client);
  });
  const allClosed = trackConnections(pool);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  let closed = false;
  return {
    db,
    pool,
    async close() {
      if (closed) return;
      closed = true;
      await db.destroy();
      await allClosed();
    },
  };
}

/** How long a pool that was ended waits for its connections to close. */
const CONNECTIONS_CLOSE_MS = 5_000;

/**
 * Counts a pool's open connections, and answers a wait for the last one to have closed. pg-pool's
 * end() resolves once it has asked each client to end, before their connections have closed: a
 * database stopped right after (the embedded Postgres, at the end of a shutdown) would cut them,
 * and each would report "terminating connection due to administrator command" as an error.
 */
export function trackConnections(pool: pg.Pool): () => Promise<void> {
  let open = 0;
  let whenNone: (() => void) | undefined;
  pool.on('connect', () => {
    open += 1;
  });
  pool.on('remove', () => {
    open -= 1;
    if (open <= 0) whenNone?.();
  });
  return async () => {
    if (open <= 0) return;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      whenNone = resolve;
      timer = setTimeout(resolve, CONNECTIONS_CLOSE_MS);
    });
    clearTimeout(timer);
  };
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Runs the migrations not yet applied, then replaces the database functions with their current
 * source (db/functions/), which wins over the migration that first created each. Returns the
 * migrations applied.
 */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = new Migrator({ db, provider: migrationProvider });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw asError(error);
  await applyDatabaseFunctions(db);
  return (results ?? []).filter((result) => result.status === 'Success').map((result) => result.migrationName);
}

/** SQLSTATE classes and codes of a connection that went away (server restart, admin kill, network). */
const CONNECTION_LOST_CODES = new Set(['57P01', '57P02', '57P03', 'ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT']);

/**
 * Whether an error says the connection to Postgres was lost rather than that a statement failed:
 * the next attempt on a new connection may well succeed. Used to tell a database restart, which
 * the jobs ride out, from a bug.
 */
export function isConnectionLoss(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (CONNECTION_LOST_CODES.has(code) || code.startsWith('08'))) return true;
  return (
    typeof message === 'string' &&
    /Connection terminated|connection terminated|Client has encountered a connection error|Client was closed/.test(
      message,
    )
  );
}
