import { sql, type Kysely } from 'kysely';

/**
 * What /relay needs beyond the receiving side: the facts of our payment to the target recorded
 * before it is sent (so a job can read the chain for it), the target's answer, the webhook record
 * of the call, the day the payment was counted against the daily limits (so a payment that never
 * settled can be taken back off them, once), and when the request answered its client while
 * something was still open (a job then finishes it without waiting for the request to time out).
 * `mode` says which endpoint took the payment: only rows of /relay are finished by the relay's jobs
 * (a /llm/chat payment pays for an answer already given, never for a target call).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions
      add column target_payer text,
      add column target_valid_before bigint,
      add column target_last_valid_block_height bigint,
      add column target_status integer check (target_status between 100 and 599),
      add column webhook_id uuid references webhooks (id),
      add column spend_day date,
      add column responded_at timestamptz,
      add column outcome text,
      add column mode text check (mode in ('relay', 'chat'));
    create unique index relay_transactions_webhook on relay_transactions (webhook_id) where webhook_id is not null;
    create index relay_transactions_unfinished on relay_transactions (updated_at)
      where mode = 'relay' and state in ('received', 'settling', 'settled', 'refund_pending', 'refund_failed', 'refunded');
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index relay_transactions_unfinished;
    drop index relay_transactions_webhook;
    alter table relay_transactions
      drop column target_payer,
      drop column target_valid_before,
      drop column target_last_valid_block_height,
      drop column target_status,
      drop column webhook_id,
      drop column spend_day,
      drop column responded_at,
      drop column outcome,
      drop column mode;
  `.execute(db);
}
