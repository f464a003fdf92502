import { sql, type Kysely } from 'kysely';

/**
 * A policy per API key for /proxy (set by `npm run admin -- set-policy`): the ceiling of a call
 * that names none, the most any call may pay (both in micro-USDC), and the target hosts the key
 * may call (host suffixes, or exact host:port). Null means no such rule. An update of these
 * columns is announced on api_keys_changed like any change of the key, so that cached keys pick
 * it up at once.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table api_keys
      add column default_max_micro_usdc bigint check (default_max_micro_usdc > 0),
      add column hard_max_micro_usdc bigint check (hard_max_micro_usdc > 0),
      add column allowed_hosts text[] check (cardinality(allowed_hosts) between 1 and 100);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table api_keys
      drop column allowed_hosts,
      drop column hard_max_micro_usdc,
      drop column default_max_micro_usdc;
  `.execute(db);
}
