import { sql, type Kysely } from 'kysely';

/**
 * relay_transactions_open (2026_11_21_0004: updated_at of the rows received, settling or
 * refund_pending) is read by no query: the sweeps of open rows and of refunds in flight read
 * relay_transactions_unfinished (2026_11_21_0006), the follow job relay_transactions_due
 * (2026_11_30_0026), and no query's states fit inside this index's. Every admission of a paid
 * /relay still wrote an entry into it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`drop index relay_transactions_open`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    create index relay_transactions_open on relay_transactions (updated_at)
      where state in ('received', 'settling', 'refund_pending')`.execute(db);
}
