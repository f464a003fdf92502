// db/prepared.ts: a statement run through runPrepared is a named prepared statement on the
// connection that runs it (parsed once, bound afterwards), with the same results as before; other
// statements stay unnamed; past MAX_NAMED texts a process names no more.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, type DbHandle } from '../../db/index';
import { MAX_NAMED, PREPARED_MARK, runPrepared } from '../../db/prepared';
import { createTestDatabase, type TestDatabase } from '../support/database';

let database: TestDatabase;
let single: DbHandle;
beforeAll(async () => {
  database = await createTestDatabase();
  // One connection: what a statement left on it is what the next one sees.
  single = createDb(database.url, { maxConnections: 1 });
});
afterAll(async () => {
  await single.close();
  await database.drop();
});

/** The prepared statements of the pool's one connection. */
async function preparedOnConnection(): Promise<Array<{ name: string; statement: string }>> {
  const { rows } = await sql<{
    name: string;
    statement: string;
  }>`select name, statement from pg_prepared_statements`.execute(single.db);
  return rows;
}

describe('runPrepared', () => {
  it('runs a statement by name on its connection, parsed once and bound with each call’s values', async () => {
    const double = (value: number) => sql<{ doubled: number }>`select ${value}::int * 2 as doubled`.compile(single.db);
    const first = await runPrepared(single.db, double(21));
    const second = await runPrepared(single.db, double(50));
    expect(first.rows).toEqual([{ doubled: 42 }]);
    expect(second.rows).toEqual([{ doubled: 100 }]);
    const named = (await preparedOnConnection()).filter((row) => row.statement.startsWith(PREPARED_MARK));
    // One statement for both calls, under the name its text gives.
    expect(named).toHaveLength(1);
    expect(named[0]).toEqual({ name: expect.stringMatching(/^prs_[0-9a-f]{32}$/), statement: expect.any(String) });
  });

  it('leaves every other statement unnamed', async () => {
    const before = (await preparedOnConnection()).length;
    await sql`select 'not marked' as text`.execute(single.db);
    await single.db.selectFrom('organisations').select('id').execute();
    expect((await preparedOnConnection()).length).toBe(before);
  });

  it('runs inside a transaction on its connection, and a failed execution leaves it usable', async () => {
    const divide = (by: number) => sql<{ quotient: number }>`select 10 / ${by}::int as quotient`.compile(single.db);
    await expect(runPrepared(single.db, divide(0))).rejects.toThrow(/division by zero/);
    await expect(
      single.db.transaction().execute(async (tx) => {
        const { rows } = await runPrepared(tx, divide(5));
        return rows;
      }),
    ).resolves.toEqual([{ quotient: 2 }]);
    expect((await runPrepared(single.db, divide(2))).rows).toEqual([{ quotient: 5 }]);
  });

  it('writes rows as the unnamed statement would, and a rolled back transaction keeps none', async () => {
    const insert = (name: string) =>
      single.db.insertInto('organisations').values({ name }).returning(['id', 'name']).compile();
    const kept = await runPrepared(single.db, insert('kept'));
    await expect(
      single.db.transaction().execute(async (tx) => {
        await runPrepared(tx, insert('rolled back'));
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    const names = await single.db
      .selectFrom('organisations')
      .select('name')
      .where('name', 'in', ['kept', 'rolled back'])
      .execute();
    expect(kept.rows[0]?.name).toBe('kept');
    expect(names).toEqual([{ name: 'kept' }]);
  });
});

describe('the names of marked statements', () => {
  it('gives one text one name, another text another, and stops naming past MAX_NAMED texts', async () => {
    const select = (text: string) => sql<{ value: string }>`select ${sql.raw(text)}::text as value`.compile(single.db);
    const names = async () => new Map((await preparedOnConnection()).map((row) => [row.statement, row.name] as const));
    const before = (await names()).size;
    await runPrepared(single.db, select("'one'"));
    await runPrepared(single.db, select("'one'"));
    await runPrepared(single.db, select("'two'"));
    const named = await names();
    expect(named.size).toBe(before + 2);
    const [one, two] = [...named].filter(([text]) => /'one'|'two'/.test(text)).map(([, name]) => name);
    expect(one).not.toBe(two);
    // Every text this process named counts (here all on this connection): past MAX_NAMED, statements run unnamed.
    for (let index = 0; index < MAX_NAMED; index += 1) {
      expect((await runPrepared(single.db, select(`'text ${index}'`))).rows).toEqual([{ value: `text ${index}` }]);
    }
    const full = await names();
    expect(full.size).toBe(MAX_NAMED);
    expect((await runPrepared(single.db, select("'one text too many'"))).rows).toEqual([
      { value: 'one text too many' },
    ]);
    expect(await names()).toEqual(full);
    // A text already named keeps its name.
    await runPrepared(single.db, select("'one'"));
    expect((await names()).get([...named].find(([text]) => text.includes("'one'"))![0])).toBe(one);
    expect(await names()).toEqual(full);
  });
});
