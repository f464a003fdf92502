/**
 * One Postgres server for the whole run: the one DATABASE_URL names, else an embedded one in a
 * throwaway directory. The run migrates a template database once; each test file clones its own
 * database from it (test/support/database.ts). Everything this run created is dropped at the end.
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

export default async function setup(project: TestProject) {
  const runId = randomBytes(4).toString('hex');
  let embedded: EmbeddedDatabase | undefined;
  let tempDir: string | undefined;
  let adminUrl: string;
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

  project.provide('pgAdminUrl', adminUrl);
  project.provide('templateDatabase', templateDatabase);
  project.provide('runId', runId);

  return async () => {
    const databases = await admin.query<{ datname: string }>(`select datname from pg_database where datname like $1`, [`prs_${runId}_%`]);
    for (const { datname } of databases.rows) {
      await admin.query(`drop database if exists "${datname}" with (force)`);
    }
    await admin.end();
    if (embedded) await embedded.stop();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  };
}
