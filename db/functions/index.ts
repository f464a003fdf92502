import { readFileSync } from 'node:fs';
import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema';

/**
 * The database functions whose rules change with the program (the credit and proxy payment moves
 * of payments/*States.ts): one `create or replace function` per file in this folder, applied after
 * the migrations on every migrate. The migration that first created a function stays as it was
 * released; the file here is its current source, so a rule is changed with one edit.
 *
 * In dependency order (a `language sql` body is checked against what exists when it is created).
 */
export const DATABASE_FUNCTIONS = [
  'try_add_spend',
  'subtract_spend',
  'reserve_credits',
  'give_back_credits',
  'charge_proxy_payment',
  'charge_proxy_payment_used',
  'release_proxy_payment',
  'admit_relay_payment',
] as const;

/**
 * Any fixed number, the same in every process: two processes replacing one function at once can
 * fail with "tuple concurrently updated", so replacements are taken one process at a time.
 */
const APPLY_LOCK = 7_402_001;

function functionSource(name: (typeof DATABASE_FUNCTIONS)[number]): string {
  return readFileSync(new URL(`./${name}.sql`, import.meta.url), 'utf8');
}

/** Replaces every function with its file's source, in one transaction under an advisory lock. Idempotent. */
export async function applyDatabaseFunctions(db: Kysely<Database>): Promise<void> {
  const sources = DATABASE_FUNCTIONS.map(functionSource);
  await db.transaction().execute(async (tx) => {
    await sql`select pg_advisory_xact_lock(${APPLY_LOCK})`.execute(tx);
    for (const source of sources) await sql.raw(source).execute(tx);
  });
}
