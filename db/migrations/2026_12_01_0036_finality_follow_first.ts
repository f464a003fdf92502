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
 * The follow job runs by the first look of every watch opened, and before other jobs
 * (payments/tracking/finality.ts queueFinalityFollow does the same from the worker and the sweep).
 *
 * Before, the trigger that opens a watch queued the follow job only when none was waiting, and the
 * sweep kept a waiting job's time: a job waiting for a later look (a quiet one, up to ten minutes
 * away on a network whose finalized head lags) held back the first look of every watch opened
 * meanwhile, past the expiry of an authorization a reorg had dropped. Now the trigger leaves a job
 * alone only when it runs by the new watch's first look, and otherwise moves it there; the job
 * has priority -10, ahead of every other job (0).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    ${openFinalityWatch(
      sql.raw(`
      if v_id is not null and not exists (
        select 1 from graphile_worker.jobs j
        where j.key = 'finality_follow' and j.locked_at is null and j.attempts < j.max_attempts
          and j.run_at <= now() + interval '1 second'
      ) then
        perform graphile_worker.add_job(
          identifier => 'finality_follow',
          payload => '{}'::json,
          queue_name => 'finality_follow',
          run_at => now() + interval '1 second',
          max_attempts => 25,
          job_key => 'finality_follow',
          priority => -10,
          job_key_mode => 'replace'
        );
      end if;
`),
    )}

    -- A follow job waiting now runs at once, with its priority.
    do $queue$
    begin
      if exists (select 1 from finality_watches where finality = 'pending') then
        perform graphile_worker.add_job(
          identifier => 'finality_follow', payload => '{}'::json, queue_name => 'finality_follow', max_attempts => 25,
          job_key => 'finality_follow', priority => -10, job_key_mode => 'replace');
      end if;
    end
    $queue$;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    ${openFinalityWatch(
      sql.raw(`
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
  `.execute(db);
}
