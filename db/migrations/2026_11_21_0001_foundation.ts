import { sql, type Kysely } from 'kysely';

/** Organisations, accounts, API keys, the credit ledger, daily spend counters and webhook records. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table organisations (
      id bigserial primary key,
      name text not null,
      credit_balance bigint not null default 0 check (credit_balance >= 0),
      created_at timestamptz not null default now()
    );

    create table accounts (
      id bigserial primary key,
      public_id uuid not null unique default gen_random_uuid(),
      organisation_id bigint not null references organisations (id),
      name text not null,
      created_at timestamptz not null default now()
    );

    create table api_keys (
      id bigserial primary key,
      account_id bigint not null references accounts (id),
      prefix text not null,
      key_hash bytea not null unique,
      daily_cap_credits bigint not null check (daily_cap_credits >= 0),
      created_at timestamptz not null default now(),
      revoked_at timestamptz
    );
    create index api_keys_account on api_keys (account_id);

    create table credit_ledger (
      id bigserial primary key,
      organisation_id bigint not null references organisations (id),
      account_id bigint references accounts (id),
      api_key_id bigint references api_keys (id),
      kind text not null check (kind in ('grant', 'reserve', 'charge', 'release', 'refund')),
      amount_credits bigint not null check (amount_credits > 0),
      reference text not null,
      created_at timestamptz not null default now()
    );
    create index credit_ledger_organisation on credit_ledger (organisation_id, id);
    create index credit_ledger_reference on credit_ledger (reference);

    create table daily_spend (
      scope text not null check (scope in ('relay_wallet', 'relay_system', 'proxy_account', 'proxy_system', 'api_key')),
      scope_id text not null,
      network_class text not null check (network_class in ('mainnet', 'testnet', 'all')),
      day date not null,
      spent bigint not null default 0 check (spent >= 0),
      primary key (scope, scope_id, network_class, day)
    );
    create index daily_spend_day on daily_spend (day);

    create table webhooks (
      id uuid primary key default gen_random_uuid(),
      kind text not null check (kind in ('proxy_payment', 'relay_refund', 'relay_payment')),
      status text not null check (status in (
        'async_processing', 'success', 'success_refunded', 'refund_confirmed', 'no_refund_needed',
        'payment_failed', 'upstream_error', 'internal_error', 'rate_limited', 'validation_failed', 'refund_failed')),
      tx_hash text,
      network text,
      method text check (method in ('facilitator', 'direct')),
      relay_tx_id bigint,
      facilitator_url text,
      message text,
      error text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create index webhooks_updated on webhooks (updated_at);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table webhooks, daily_spend, credit_ledger, api_keys, accounts, organisations`.execute(db);
}
