import { sql, type Kysely } from 'kysely';

/**
 * Credits held for a proxy payment while it is in flight. A reservation is charged or released
 * exactly once: the state moves only from reserved, in a guarded update.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table credit_reservations (
      id bigserial primary key,
      reference text not null unique,
      organisation_id bigint not null references organisations (id),
      account_id bigint not null references accounts (id),
      api_key_id bigint not null references api_keys (id),
      network_class text not null check (network_class in ('mainnet', 'testnet')),
      day date not null,
      credits bigint not null check (credits > 0),
      state text not null default 'reserved' check (state in ('reserved', 'charged', 'released')),
      created_at timestamptz not null default now(),
      settled_at timestamptz
    );
    create index credit_reservations_open on credit_reservations (created_at) where state = 'reserved';
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table credit_reservations`.execute(db);
}
