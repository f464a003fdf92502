import { sql, type Kysely } from 'kysely';

/**
 * Credits bought over x402 (POST /v1/credits/purchase). The client's payment is a relay
 * transaction of mode 'purchase' (received, settled and followed up as every payment we receive);
 * its purchase row says for whom and how many credits, is unique per payment (`payment_id`, the
 * SHA-256 of the payment's payload, and the relay transaction), carries its webhook record from
 * the start, and moves once from settling to credited (with the balance and a ledger entry of
 * kind 'purchase', in one transaction) or to failed.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions drop constraint relay_transactions_mode_check;
    alter table relay_transactions add constraint relay_transactions_mode_check check (mode in ('relay', 'chat', 'purchase'));
    alter table credit_ledger drop constraint credit_ledger_kind_check;
    alter table credit_ledger add constraint credit_ledger_kind_check
      check (kind in ('grant', 'reserve', 'charge', 'release', 'refund', 'purchase'));
    alter table webhooks drop constraint webhooks_kind_check;
    alter table webhooks add constraint webhooks_kind_check
      check (kind in ('proxy_payment', 'relay_refund', 'relay_payment', 'credit_purchase'));
    create table credit_purchases (
      id bigserial primary key,
      payment_id text not null unique check (length(payment_id) = 64),
      relay_transaction_id bigint not null unique references relay_transactions (id),
      organisation_id bigint not null references organisations (id),
      api_key_id bigint not null references api_keys (id),
      credits bigint not null check (credits > 0),
      state text not null default 'settling' check (state in ('settling', 'credited', 'failed')),
      webhook_id uuid not null references webhooks (id),
      balance_after bigint,
      failure text,
      created_at timestamptz not null default now(),
      finished_at timestamptz,
      check ((state = 'credited') = (balance_after is not null))
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop table credit_purchases;
    delete from webhooks where kind = 'credit_purchase';
    alter table webhooks drop constraint webhooks_kind_check;
    alter table webhooks add constraint webhooks_kind_check check (kind in ('proxy_payment', 'relay_refund', 'relay_payment'));
    alter table credit_ledger drop constraint credit_ledger_kind_check;
    alter table credit_ledger add constraint credit_ledger_kind_check
      check (kind in ('grant', 'reserve', 'charge', 'release', 'refund'));
    alter table relay_transactions drop constraint relay_transactions_mode_check;
    alter table relay_transactions add constraint relay_transactions_mode_check check (mode in ('relay', 'chat'));
  `.execute(db);
}
