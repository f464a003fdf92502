import { sql, type Kysely } from 'kysely';

/**
 * Who runs a claimed call, and until when that is known (docs/decisions.md, Idempotency-Key). A
 * record is claimed with a `claim` id of its own and the `owner` instance that runs it; the owner
 * renews `lease_expires_at` while it lives. A repeat that finds a running record whose lease has
 * lapsed knows its process died: it answers from the money records the call left, which carry the
 * claim (`idempotency_claim` on relay_transactions and proxy_payments, written in the statement
 * that records the money). Rows claimed before this migration have no claim: they keep answering
 * 409 until they expire.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table idempotency_records
      add column claim uuid,
      add column owner text,
      add column lease_expires_at timestamptz;
    create index idempotency_records_owner on idempotency_records (owner) where state = 'running';
    alter table relay_transactions add column idempotency_claim uuid;
    create index relay_transactions_idempotency_claim on relay_transactions (idempotency_claim)
      where idempotency_claim is not null;
    alter table proxy_payments add column idempotency_claim uuid;
    create index proxy_payments_idempotency_claim on proxy_payments (idempotency_claim)
      where idempotency_claim is not null;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index proxy_payments_idempotency_claim;
    alter table proxy_payments drop column idempotency_claim;
    drop index relay_transactions_idempotency_claim;
    alter table relay_transactions drop column idempotency_claim;
    drop index idempotency_records_owner;
    alter table idempotency_records drop column claim, drop column owner, drop column lease_expires_at;
  `.execute(db);
}
