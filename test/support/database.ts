import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { createDb, type Db, type DbHandle } from '../../db/index';

export interface TestDatabase {
  url: string;
  handle: DbHandle;
  drop(): Promise<void>;
}

/**
 * The admin URL of this run's Postgres. Only the projects whose global setup starts it have one
 * (not unit): without it, this throws rather than let pg fall back to a server of its choosing.
 */
export function pgAdminUrl(): string {
  const adminUrl = inject('pgAdminUrl');
  if (!adminUrl)
    throw new Error(
      'no Postgres in this test project: a test that needs the database belongs to a project with test/setup/global.ts (see vitest.config.ts)',
    );
  return adminUrl;
}

/** A fresh, migrated database of this run, cloned from the run's template. */
export async function createTestDatabase(): Promise<TestDatabase> {
  return newDatabase(
    `prs_${inject('runId')}_${randomBytes(4).toString('hex')}`,
    `template "${inject('templateDatabase')}"`,
  );
}

/** A fresh database of this run with no migration applied, for the tests of the migrations themselves. */
export async function createEmptyTestDatabase(label: string): Promise<TestDatabase> {
  return newDatabase(`prs_${inject('runId')}_${label}_${randomBytes(3).toString('hex')}`, '');
}

async function newDatabase(name: string, options: string): Promise<TestDatabase> {
  const adminUrl = pgAdminUrl();
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`create database "${name}" ${options}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const handle = createDb(url.toString(), { maxConnections: 10 });
  return {
    url: url.toString(),
    handle,
    async drop() {
      await handle.close();
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

/**
 * A database of its own for the tests of one file: created before them, dropped after them. The
 * accessor gives its Kysely handle once the tests run.
 */
export function useTestDatabase(): () => Db {
  let database: TestDatabase | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.drop();
  });
  return () => {
    if (!database) throw new Error('the test database is made before the tests run');
    return database.handle.db;
  };
}
