import { sql, type Kysely } from 'kysely';

/**
 * Idle payer channels given back (payments/outgoing/channelIdle.ts): a channel of ours unused for
 * PAYER_CHANNEL_IDLE_SECONDS becomes `closing` (no call signs on it again: a call to the same
 * terms opens a new channel), then `closed` once its balance is back in our wallet.
 *
 * - refund_requested_at, refund_url: the cooperative refund asked of the seller (written before the
 *   request leaves, so a crash finds it), at the resource our last charged voucher paid for;
 *   refund_tx_hash, the seller's refund transaction as its PAYMENT-RESPONSE named it.
 * - withdraw_*: our own initiateWithdraw when the seller does not refund (the amount: the balance
 *   less what the seller charged or claimed), its hash stored before it is broadcast, and its state;
 *   withdraw_finalize_after, unix seconds by the chain's clock from which finalizeWithdraw can run.
 * - finalize_*: our finalizeWithdraw, hash stored before broadcast, and its state.
 * - closing_details: the last step's outcome in words, for operators; closed_at.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table payer_channels
      add column refund_requested_at timestamptz,
      add column refund_url text,
      add column refund_tx_hash text,
      add column withdraw_amount_atomic numeric(78, 0) check (withdraw_amount_atomic > 0),
      add column withdraw_tx_hash text,
      add column withdraw_tx_state text check (withdraw_tx_state in ('sent', 'confirmed', 'reverted')),
      add column withdraw_finalize_after bigint,
      add column finalize_tx_hash text,
      add column finalize_tx_state text check (finalize_tx_state in ('sent', 'confirmed', 'reverted')),
      add column closing_details text,
      add column closed_at timestamptz;
    create index payer_channels_idle on payer_channels (last_used_at) where state = 'open';
    create index payer_channels_closing on payer_channels (channel_id) where state = 'closing';
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index payer_channels_closing;
    drop index payer_channels_idle;
    alter table payer_channels
      drop column refund_requested_at,
      drop column refund_url,
      drop column refund_tx_hash,
      drop column withdraw_amount_atomic,
      drop column withdraw_tx_hash,
      drop column withdraw_tx_state,
      drop column withdraw_finalize_after,
      drop column finalize_tx_hash,
      drop column finalize_tx_state,
      drop column closing_details,
      drop column closed_at;
  `.execute(db);
}
