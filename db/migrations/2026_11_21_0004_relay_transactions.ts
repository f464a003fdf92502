import { sql, type Kysely } from 'kysely';

/**
 * Relay payments received from clients, and the refunds we send back.
 *
 * relay_transactions: one row per X-PAYMENT we accepted, written before anything is settled. The
 * unique index on (network, asset, nonce_key) is the replay guard: a second use of an
 * authorization nonce (EVM) or of a payer's transaction signature (Solana) fails on it, also when
 * two arrive at the same moment. The row keeps the payment and the requirement it matched, so that
 * a job can settle or reconcile it from the row alone. State moves only by guarded updates.
 *
 * refunds: at most one pending or confirmed refund per relay transaction (a partial unique index);
 * a failed refund may be followed by a new attempt.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table relay_transactions (
      id bigserial primary key,
      network text not null,
      chain_type text not null check (chain_type in ('evm', 'solana')),
      asset text not null,
      payer text not null,
      pay_to text not null,
      amount_micro bigint not null check (amount_micro > 0),
      nonce_key text not null,
      payment_payload jsonb not null,
      payment_requirements jsonb not null,
      valid_before bigint,
      state text not null default 'received' check (state in (
        'received', 'settling', 'settled', 'settle_failed', 'delivered', 'refund_pending', 'refunded', 'refund_failed')),
      settle_method text check (settle_method in ('facilitator', 'direct')),
      client_tx_hash text,
      failure_reason text,
      failure_details text,
      target_url text,
      target_method text,
      target_network text,
      target_amount_micro bigint check (target_amount_micro > 0),
      target_payment_ref text,
      target_tx_hash text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      settled_at timestamptz
    );
    create unique index relay_transactions_nonce on relay_transactions (network, asset, nonce_key);
    create index relay_transactions_open on relay_transactions (updated_at) where state in ('received', 'settling', 'refund_pending');

    create table refunds (
      id bigserial primary key,
      relay_transaction_id bigint not null references relay_transactions (id),
      network text not null,
      asset text not null,
      recipient text not null,
      amount_micro bigint not null check (amount_micro > 0),
      method text not null check (method in ('facilitator', 'direct')),
      status text not null default 'pending' check (status in ('pending', 'confirmed', 'failed')),
      tx_hash text,
      blockhash text,
      error text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      confirmed_at timestamptz
    );
    create unique index refunds_one_live on refunds (relay_transaction_id) where status in ('pending', 'confirmed');
    create index refunds_relay_transaction on refunds (relay_transaction_id);
    create index refunds_pending on refunds (updated_at) where status = 'pending';
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table refunds, relay_transactions`.execute(db);
}
