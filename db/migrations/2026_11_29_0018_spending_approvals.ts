import { sql, type Kysely } from 'kysely';

/**
 * The standing approvals our wallet gave so that it can pay targets: today Permit2's, one per
 * network, token and wallet (an ERC-20 approve of every unit to the canonical Permit2 contract),
 * given once and never again. The transaction is stored before it is broadcast; `confirmed_at`
 * and its gas (gas used, and its cost in wei of the network's native coin) once the receipt says
 * it succeeded.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table spending_approvals (
      network text not null,
      token text not null,
      owner text not null,
      spender text not null,
      tx_hash text,
      gas_used numeric(78, 0),
      gas_fee_wei numeric(78, 0),
      created_at timestamptz not null default now(),
      confirmed_at timestamptz,
      primary key (network, token, owner, spender),
      check ((confirmed_at is null) or (tx_hash is not null and gas_used is not null and gas_fee_wei is not null))
    );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table spending_approvals;`.execute(db);
}
