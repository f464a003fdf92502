import { sql, type Kysely } from 'kysely';

/**
 * Open relay transactions are followed in batches: the row is the queue. An admitted payment's
 * row says when it is first looked at (`look_at`: once its request is presumed gone, or its
 * idempotency lease would have lapsed), instead of a `relay_watch` job of its own per payment
 * (graphile_worker.add_job cost the database a large share of a paid /relay call). One
 * `relay_follow` job (one job key and one queue for the service, so one run at a time) looks at
 * every row that is due and still open (received, settling, settled) and queues itself again for
 * the next one; admit_relay_payment queues it only when none waits for that time or earlier. A row
 * delivered (or failed, or refunding) leaves the index by its own move, with no write of its own.
 * The relay_sweep cron queues the follow job again while a row is overdue for its look.
 *
 * Rows admitted before this migration keep their relay_watch jobs (look_at stays null).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions add column look_at timestamptz;
    create index relay_transactions_due on relay_transactions (look_at)
      where look_at is not null and state in ('received', 'settling', 'settled');
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index relay_transactions_due;
    alter table relay_transactions drop column look_at;
  `.execute(db);
}
