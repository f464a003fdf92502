import { sql, type Kysely } from 'kysely';

/**
 * Channels clients pay us through (x402 `batch-settlement`, payments/incoming/channels/): our mirror
 * of each channel the x402BatchSettlement contract holds with us as receiver, and the charges we
 * committed on it.
 *
 * - receiver_channels: one row per channel id (lowercase hex), its immutable config, what we
 *   charged so far (charged_cumulative) and the payer's latest voucher covering it
 *   (signed_max_claimable, signature), the chain's view as last read (balance, total_claimed,
 *   withdraw_requested_at in unix seconds, refund_nonce, onchain_synced_at), and the request being
 *   served (pending_id, pending_until: one request at a time per channel across every instance;
 *   rows are updated under SELECT ... FOR UPDATE). claim_due_at: when the worker must have claimed
 *   (a pending withdrawal's end less a margin); null when no withdrawal is pending.
 * - receiver_channel_charges: one row per committed charge; (channel_id, cumulative) is unique,
 *   so no cumulative amount is ever committed twice, whatever the instances do.
 * - receiver_channel_claims: our claim and settle transactions (hash stored before broadcast).
 *
 * Amounts are token atomic units in numeric(78, 0) (uint128 on chain), read back as strings.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table receiver_channels (
      channel_id text primary key check (channel_id ~ '^0x[0-9a-f]{64}$'),
      network text not null,
      payer text not null,
      payer_authorizer text not null,
      receiver text not null,
      token text not null,
      withdraw_delay integer not null check (withdraw_delay > 0),
      config jsonb not null,
      charged_cumulative numeric(78, 0) not null default 0 check (charged_cumulative >= 0),
      signed_max_claimable numeric(78, 0) not null default 0 check (signed_max_claimable >= charged_cumulative),
      signature text,
      balance numeric(78, 0) not null default 0 check (balance >= 0),
      total_claimed numeric(78, 0) not null default 0 check (total_claimed >= 0),
      withdraw_requested_at bigint not null default 0,
      refund_nonce bigint not null default 0,
      onchain_synced_at timestamptz,
      pending_id uuid,
      pending_until timestamptz,
      last_request_at timestamptz,
      claim_due_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create index receiver_channels_claimable on receiver_channels (network, token)
      where charged_cumulative > total_claimed;
    create index receiver_channels_claim_due on receiver_channels (claim_due_at)
      where claim_due_at is not null;

    create table receiver_channel_charges (
      id bigserial primary key,
      channel_id text not null references receiver_channels (channel_id),
      cumulative numeric(78, 0) not null,
      amount numeric(78, 0) not null check (amount > 0),
      signed_max_claimable numeric(78, 0) not null check (signed_max_claimable >= cumulative),
      target_url text,
      created_at timestamptz not null default now(),
      unique (channel_id, cumulative)
    );

    create table receiver_channel_claims (
      id bigserial primary key,
      network text not null,
      kind text not null check (kind in ('claim', 'settle', 'refund')),
      tx_hash text,
      channels integer not null default 0,
      amount numeric(78, 0) not null default 0,
      state text not null default 'sent' check (state in ('sent', 'confirmed', 'failed')),
      details text,
      created_at timestamptz not null default now()
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop table receiver_channel_claims;
    drop table receiver_channel_charges;
    drop table receiver_channels;
  `.execute(db);
}
