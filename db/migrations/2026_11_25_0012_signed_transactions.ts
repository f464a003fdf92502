import { sql, type Kysely } from 'kysely';

/**
 * The signed bytes of the transactions our wallet broadcasts, stored with their hash before the
 * broadcast: the settlement of a client's payment (relay_transactions.client_raw_tx) and a refund
 * (refunds.raw_tx). A broadcast lost on its way (the RPC connection dropped, a 503) leaves a hash
 * the node never heard of; the follow-up sends the same bytes again, so the transaction lands in
 * seconds instead of waiting for the authorization to expire. The same bytes are the same
 * transaction (same nonce, same hash): sending them again can never pay twice.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions add column client_raw_tx text;
    alter table refunds add column raw_tx text;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table refunds drop column raw_tx;
    alter table relay_transactions drop column client_raw_tx;
  `.execute(db);
}
