import { sql, type Kysely } from 'kysely';

/**
 * One row per payment the service wallet makes to a target for /proxy, written before the payment
 * is signed and updated before it is sent, so that a crash at any step leaves a row a job can
 * finish by reading the chain. `reference` is the payment's idempotency key (on EVM the
 * authorization nonce) and the reference of its credit reservation.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table proxy_payments (
      id bigserial primary key,
      reference text not null unique references credit_reservations (reference),
      organisation_id bigint not null references organisations (id),
      account_id bigint not null references accounts (id),
      api_key_id bigint not null references api_keys (id),
      request_id text not null,
      target_url text not null,
      network text not null,
      chain_type text not null check (chain_type in ('evm', 'solana')),
      pay_to text not null,
      amount_micro_usdc bigint not null check (amount_micro_usdc > 0),
      credits bigint not null check (credits > 0),
      state text not null default 'reserved' check (state in ('reserved', 'signed', 'charged', 'released')),
      payer text,
      payer_signature text,
      valid_before bigint,
      last_valid_block_height bigint,
      tx_hash text,
      webhook_id uuid references webhooks (id),
      outcome text,
      created_at timestamptz not null default now(),
      signed_at timestamptz,
      settled_at timestamptz
    );
    create index proxy_payments_open on proxy_payments (created_at) where state in ('reserved', 'signed');
    create unique index proxy_payments_webhook on proxy_payments (webhook_id) where webhook_id is not null;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table proxy_payments`.execute(db);
}
