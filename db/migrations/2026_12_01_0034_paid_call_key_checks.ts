import { sql, type Kysely } from 'kysely';

/**
 * The rows every paid call writes no longer check, by foreign key, what they name:
 *
 * - a /proxy call's payment row and its two ledger entries, their organisation, account and API
 *   key. The ids come from the API key the call authenticated with, read from those tables, and
 *   no organisation, account or key is ever deleted (a key is revoked); the hold's own update of
 *   the organisation's balance refuses an organisation that does not exist;
 * - a finality watch, its /proxy payment or relay transaction: only the triggers of that row
 *   open it (open_finality_watch, with the id of the row being written), and neither table is
 *   deleted from.
 *
 * Each such check is a query of its own, run by Postgres at the end of the statement, that also
 * locks the parent row (FOR KEY SHARE, a write to that row's page and to the WAL; a multixact when
 * calls of one key overlap): ten per paid /proxy call, more than the call's own statements, and
 * two per /relay call. The other foreign keys stay.
 */
const KEYS = [
  ['credit_ledger', 'organisation_id', 'organisations'],
  ['credit_ledger', 'account_id', 'accounts'],
  ['credit_ledger', 'api_key_id', 'api_keys'],
  ['proxy_payments', 'organisation_id', 'organisations'],
  ['proxy_payments', 'account_id', 'accounts'],
  ['proxy_payments', 'api_key_id', 'api_keys'],
  ['finality_watches', 'proxy_payment_id', 'proxy_payments'],
  ['finality_watches', 'relay_transaction_id', 'relay_transactions'],
] as const;

export async function up(db: Kysely<unknown>): Promise<void> {
  for (const [table, column] of KEYS)
    await sql.raw(`alter table ${table} drop constraint ${table}_${column}_fkey`).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const [table, column, parent] of KEYS)
    await sql
      .raw(
        `alter table ${table} add constraint ${table}_${column}_fkey foreign key (${column}) references ${parent} (id)`,
      )
      .execute(db);
}
