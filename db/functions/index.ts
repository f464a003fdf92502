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
  'subtract_spend',
  'add_spend',
  'daily_spent',
  'reserve_credits',
  'give_back_credits',
  'charge_proxy_payment',
  'charge_proxy_payment_used',
  'release_proxy_payment',
  'add_upto_exposure',
  'admit_relay_payment',
] as const;

/**
 * Functions no longer called, dropped once every function has its current source: in the same
 * transaction, so no caller of the previous source is left without its callee. try_add_spend moved
 * one counter at a time; add_spend moves a call's counters in one statement.
 */
export const RETIRED_FUNCTIONS = ['try_add_spend(text, text, text, date, bigint, bigint)'] as const;

/**
 * Any fixed number, the same in every process: two processes replacing one function at once can
 * fail with "tuple concurrently updated", so replacements are taken one process at a time.
 */
const APPLY_LOCK = 7_402_001;

function functionSource(name: (typeof DATABASE_FUNCTIONS)[number]): string {
  return readFileSync(new URL(`./${name}.sql`, import.meta.url), 'utf8');
}

/** Replaces every function with its file's source and drops the retired ones, in one transaction under an advisory lock. Idempotent. */
export async function applyDatabaseFunctions(db: Kysely<Database>): Promise<void> {
  const sources = DATABASE_FUNCTIONS.map(functionSource);
  await db.transaction().execute(async (tx) => {
    await sql`select pg_advisory_xact_lock(${APPLY_LOCK})`.execute(tx);
    for (const source of sources) await sql.raw(source).execute(tx);
    for (const signature of RETIRED_FUNCTIONS) await sql.raw(`drop function if exists ${signature}`).execute(tx);
  });
}
