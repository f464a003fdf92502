import { sql, type Kysely } from 'kysely';

/**
 * wallet_floats: our wallet's holdings on each network as the float job last read them
 * (payments/tracking/float.ts): the stablecoin in its atomic units and the gas token (wei,
 * lamports), both numeric(78, 0) (wei do not fit a bigint), and when. One row per network, written
 * by the job of any worker and read by every API instance: /relay and /proxy refuse below a
 * network's floor from this reading, never from a chain read of their own. A failed read keeps the
 * last figures and records its error beside them.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table wallet_floats (
      network text primary key,
      wallet text not null,
      asset_atomic numeric(78, 0) not null,
      gas_atomic numeric(78, 0) not null,
      read_at timestamptz not null,
      error text,
      error_at timestamptz
    )
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table wallet_floats`.execute(db);
}
