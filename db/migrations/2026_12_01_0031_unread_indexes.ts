import { sql, type Kysely } from 'kysely';

/**
 * Three indexes no query reads, each maintained by the writes of every paid call:
 *
 * - relay_transactions_open (2026_11_21_0004: updated_at of the rows received, settling or
 *   refund_pending): the sweeps of open rows and of refunds in flight read
 *   relay_transactions_unfinished (2026_11_21_0006), the follow job relay_transactions_due
 *   (2026_11_30_0026), and no query's states fit inside this index's;
 * - credit_reservations_open (2026_11_21_0002: created_at of the reserved rows): reservations are
 *   read by their reference only (the sweep of open /proxy payments reads proxy_payments_open); as
 *   its predicate names the state, it also kept the charge's update of the row from being a
 *   heap-only one;
 * - credit_ledger_organisation (2026_11_21_0001: organisation_id, id): an organisation's ledger is
 *   read through credit_ledger_organisation_movements (2026_11_28_0016), its finality by reference.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index relay_transactions_open;
    drop index credit_reservations_open;
    drop index credit_ledger_organisation;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    create index relay_transactions_open on relay_transactions (updated_at)
      where state in ('received', 'settling', 'refund_pending');
    create index credit_reservations_open on credit_reservations (created_at) where state = 'reserved';
    create index credit_ledger_organisation on credit_ledger (organisation_id, id);
  `.execute(db);
}
