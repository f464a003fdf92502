/**
 * Named prepared statements for the statements every paid call runs. Postgres parses and plans an
 * unnamed statement on every execution; for the proxy's hold (a CTE around reserve_credits and the
 * payment row) that was about a third of the statement's CPU on the server. A statement run
 * through runPrepared is named after its text on each connection of our pool: parsed and planned
 * once per connection, then only bound and executed.
 *
 * Only statements whose text is one of a few fixed shapes go through here (their values are
 * parameters), so each connection holds a bounded number of them; past MAX_NAMED distinct texts in
 * a process, further ones run unnamed, as any other statement. Nor may a marked statement return
 * a table's `*`: once a migration adds a column, Postgres refuses to run a named one whose result
 * would change ("cached plan must not change result type") on the instances still running. A
 * pooler in transaction mode must support protocol-level prepared statements (PgBouncer 1.21 and
 * later, max_prepared_statements).
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { CompiledQuery, QueryResult } from 'kysely';
import type { Db, Tx } from './index';

/** The comment that marks a statement's text for naming (and stays in it: pg_stat_activity shows it). */
export const PREPARED_MARK = '/* prepared */ ';

/** Distinct statement texts named in one process at the most. */
export const MAX_NAMED = 256;

const names = new Map<string, string>();

/** The name of a marked statement's text: the same text always gets the same name. */
function statementName(text: string): string | undefined {
  let name = names.get(text);
  if (name === undefined) {
    if (names.size >= MAX_NAMED) return undefined;
    name = `prs_${createHash('sha256').update(text).digest('hex').slice(0, 32)}`;
    names.set(text, name);
  }
  return name;
}

/** Runs a compiled query as a named prepared statement on whichever connection `db` uses. */
export function runPrepared<R>(db: Db | Tx, query: CompiledQuery<R>): Promise<QueryResult<R>> {
  return db.executeQuery<R>({ ...query, sql: PREPARED_MARK + query.sql });
}

type QueryFunction = (...args: unknown[]) => unknown;

/**
 * Makes a pooled client send marked statements by name (pg parses a name once per connection and
 * binds it afterwards); every other call goes through unchanged.
 */
export function namePreparedStatements(client: pg.PoolClient): void {
  const query = client.query.bind(client) as QueryFunction;
  const named: QueryFunction = (...args) => {
    const [text, values, callback] = args;
    if (typeof text === 'string' && text.startsWith(PREPARED_MARK) && typeof values !== 'function') {
      const name = statementName(text);
      if (name !== undefined) {
        const config = { name, text, values: values as unknown[] | undefined };
        return callback === undefined ? query(config) : query(config, callback);
      }
    }
    return query(...args);
  };
  client.query = named as typeof client.query;
}
