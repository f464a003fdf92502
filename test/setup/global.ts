/**
 * One Postgres server for the whole run: the one DATABASE_URL names, else an embedded one in a
 * throwaway directory. The run migrates a template database once; each test file clones its own
 * database from it (test/support/database.ts). Everything this run created is dropped at the end.
 *
 * Every project that needs Postgres names this file as its globalSetup; the server and the
 * template are made by the first of them and shared by the others (one per run, not one per
 * project), and dropped when the last of them tears down. The unit project does not name it, so
 * a unit test that reaches for a database finds no pgAdminUrl and fails.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { runMigrations } from 'graphile-worker';
import type { TestProject } from 'vitest/node';
import { createDb, migrateToLatest } from '../../db/index';
import { pruneStaleClusters, startEmbeddedPostgres, type EmbeddedDatabase } from '../../db/embedded';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    templateDatabase: string;
    runId: string;
  }
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

interface RunDatabase {
  adminUrl: string;
  templateDatabase: string;
  runId: string;
  close(): Promise<void>;
}

async function startRunDatabase(): Promise<RunDatabase> {
  const runId = randomBytes(4).toString('hex');
  let embedded: EmbeddedDatabase | undefined;
  let tempDir: string | undefined;
  let adminUrl: string;
  // Test files make their scratch directories under .tmp, which a fresh clone does not have.
  mkdirSync(path.resolve('.tmp'), { recursive: true });
  if (process.env.DATABASE_URL) {
    adminUrl = withDatabase(process.env.DATABASE_URL, 'postgres');
  } else {
    const parent = path.resolve('.tmp');
    mkdirSync(parent, { recursive: true });
    pruneStaleClusters(parent, 'test-pg-');
    tempDir = path.join(parent, `test-pg-${runId}`);
    embedded = await startEmbeddedPostgres({ dataDir: tempDir, persistent: false });
    adminUrl = embedded.adminUrl;
  }
  const templateDatabase = `prs_${runId}_template`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database "${templateDatabase}"`);
  const templateUrl = withDatabase(adminUrl, templateDatabase);
  const handle = createDb(templateUrl, { maxConnections: 1 });
  await migrateToLatest(handle.db);
  await handle.close();
  await runMigrations({ connectionString: templateUrl, logger: undefined });

  return {
    adminUrl,
    templateDatabase,
    runId,
    async close() {
      const databases = await admin.query<{ datname: string }>(
        `select datname from pg_database where datname like $1`,
        [`prs_${runId}_%`],
      );
      for (const { datname } of databases.rows) {
        await admin.query(`drop database if exists "${datname}" with (force)`);
      }
      await admin.end();
      if (embedded) await embedded.stop();
      if (tempDir) rmSync(tempDir, { recursive: true, force: true });
    },
  };
}

/** The run's database, shared by the projects' global setups (they run in one process). */
interface Shared {
  database: Promise<RunDatabase>;
  users: number;
}
const SHARED = Symbol.for('payment-routing-service.test.run-database');
type WithShared = typeof globalThis & { [SHARED]?: Shared };

export default async function setup(project: TestProject) {
  const holder = globalThis as WithShared;
  const shared = (holder[SHARED] ??= { database: startRunDatabase(), users: 0 });
  shared.users += 1;
  const database = await shared.database;

  project.provide('pgAdminUrl', database.adminUrl);
  project.provide('templateDatabase', database.templateDatabase);
  project.provide('runId', database.runId);

  return async () => {
    shared.users -= 1;
    if (shared.users > 0) return;
    Reflect.deleteProperty(holder, SHARED);
    await database.close();
  };
}
