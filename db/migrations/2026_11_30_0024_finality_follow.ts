import { sql, type Kysely, type RawBuilder } from 'kysely';

/** open_finality_watch: the watch inserted once per subject, then `queue` (its new id in v_id, null when it existed). */
const openFinalityWatch = (queue: RawBuilder<unknown>) => sql`
    create or replace function open_finality_watch(
      p_subject text, p_leg text, p_network text, p_relay bigint, p_proxy bigint, p_refund bigint,
      p_tx_hash text, p_payer text, p_amount bigint, p_transfer jsonb
    ) returns void language plpgsql as $fn$
    declare
      v_id bigint;
    begin
      insert into finality_watches
        (subject, leg, network, relay_transaction_id, proxy_payment_id, refund_id, tx_hash, payer, amount_micro_usdc, transfer)
        values (p_subject, p_leg, p_network, p_relay, p_proxy, p_refund, p_tx_hash, p_payer, p_amount, p_transfer)
        on conflict (subject) do nothing
        returning id into v_id;
      ${queue}
    end
    $fn$;`;

/**
 * Finality watches are followed in batches: the watch row is the queue. Each pending watch says
 * when it is looked at next (`look_at`, a second after it opens); one `finality_follow` job (one
 * job key and one queue for the whole service, so one run at a time and no watch looked at by two
 * runs at once) looks at every watch that is due and queues itself again for the next one. The
 * trigger that opens a watch no longer adds a job of its own per watch (graphile_worker.add_job
 * cost the database more than the rest of a /proxy charge): it adds the follow job only when none
 * is waiting, so most payments write their watch row and nothing else. A watch cannot be
 * forgotten: it is a row that stays pending until a look finds it final or lost, and the
 * `finality_sweep` cron queues the follow job every minute while a watch is overdue for its look.
 *
 * A `finality_watch` job queued before this migration only queues the follow job when it runs.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table finality_watches add column look_at timestamptz not null default now() + interval '1 second';
    create index finality_watches_due on finality_watches (look_at) where finality = 'pending';

    ${openFinalityWatch(
      sql.raw(`
      -- A follow job waiting to run (not yet taken by a worker) will see this watch; a running one
      -- may have read the watches already, so another is queued behind it.
      if v_id is not null and not exists (
        select 1 from graphile_worker.jobs j where j.key = 'finality_follow' and j.locked_at is null
      ) then
        perform graphile_worker.add_job(
          identifier => 'finality_follow',
          payload => '{}'::json,
          queue_name => 'finality_follow',
          run_at => now() + interval '1 second',
          max_attempts => 25,
          job_key => 'finality_follow',
          job_key_mode => 'preserve_run_at'
        );
      end if;
`),
    )}

    -- Watches opened before are followed the same way, from now on.
    do $queue$
    begin
      if exists (select 1 from finality_watches where finality = 'pending') then
        perform graphile_worker.add_job(
          identifier => 'finality_follow', payload => '{}'::json, queue_name => 'finality_follow', max_attempts => 25,
          job_key => 'finality_follow', job_key_mode => 'preserve_run_at');
      end if;
    end
    $queue$;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ${openFinalityWatch(
      sql.raw(`
      if v_id is not null then
        perform graphile_worker.add_job(
          identifier => 'finality_watch',
          payload => json_build_object('watchId', v_id::text),
          run_at => now() + interval '1 second',
          max_attempts => 25,
          job_key => 'finality_watch:' || v_id::text
        );
      end if;
`),
    )}
    drop index finality_watches_due;
    alter table finality_watches drop column look_at;
  `.execute(db);
}
