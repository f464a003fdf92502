import { sql, type Kysely } from 'kysely';
import { up as usageDailyRowsUp, USAGE_ROW_KEY } from './2026_12_01_0028_usage_daily_rows';
import { USAGE_ADD_ON_CONFLICT } from './2026_11_30_0024_usage_daily_direct';

/**
 * The daily usage summary (usage_daily) keeps only what is settled: charged and released payments.
 * A payment still open (reserved or signed) is counted when the summary is read, from the payment
 * rows themselves (payments/usage.ts usageReport; proxy_payments_open finds them): they are few and
 * short-lived. The hold of every paid /proxy call then writes no summary row, and its insert runs
 * no trigger: the summary is written once per payment, when it settles, rather than on its hold
 * and again on its charge. The pending columns stay, zero, for instances still running the
 * previous release (they read no pending spend until they are replaced).
 */
const SETTLED = (row: 'old' | 'new') => `${row}.state in ('charged', 'released')`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    create or replace function usage_daily_row() returns trigger language plpgsql as $fn$
    declare
${USAGE_ROW_KEY}
      -- The row as it was (subtracted) and as it is (added): its settled state (null while open), credits, micro-USDC.
      v_old_state text;
      v_old_credits bigint;
      v_old_amount bigint;
      v_new_state text;
      v_new_credits bigint;
      v_new_amount bigint;
      v_delta bigint[];
    begin
      -- One summary row, or two when an update moved the payment to another day, key or host.
      for v_part in 1 .. case when tg_op = 'UPDATE' and not v_same_key then 2 else 1 end loop
        v_old_state := null; v_old_credits := 0; v_old_amount := 0;
        v_new_state := null; v_new_credits := 0; v_new_amount := 0;
        if tg_op <> 'INSERT' and v_part = 1 then
          v_old_state := old.state; v_old_credits := old.credits; v_old_amount := old.amount_micro_usdc;
          v_organisation_id := old.organisation_id; v_day := (old.created_at at time zone 'UTC')::date;
          v_api_key_id := old.api_key_id; v_host := old.target_host;
        end if;
        if tg_op <> 'DELETE' and (v_same_key or tg_op = 'INSERT' or v_part = 2) then
          v_new_state := new.state; v_new_credits := new.credits; v_new_amount := new.amount_micro_usdc;
          v_organisation_id := new.organisation_id; v_day := (new.created_at at time zone 'UTC')::date;
          v_api_key_id := new.api_key_id; v_host := new.target_host;
        end if;
        -- Per settled state (charged, released): payments, credits, micro-USDC.
        v_delta := array[
          (v_new_state is not distinct from 'charged')::int - (v_old_state is not distinct from 'charged')::int,
          case when v_new_state = 'charged' then v_new_credits else 0 end - case when v_old_state = 'charged' then v_old_credits else 0 end,
          case when v_new_state = 'charged' then v_new_amount else 0 end - case when v_old_state = 'charged' then v_old_amount else 0 end,
          (v_new_state is not distinct from 'released')::int - (v_old_state is not distinct from 'released')::int,
          case when v_new_state = 'released' then v_new_credits else 0 end - case when v_old_state = 'released' then v_old_credits else 0 end,
          case when v_new_state = 'released' then v_new_amount else 0 end - case when v_old_state = 'released' then v_old_amount else 0 end];
        continue when v_delta = '{0,0,0,0,0,0}';
        insert into usage_daily as u values (
          v_organisation_id, v_day, v_api_key_id, coalesce(v_host, ''),
          v_delta[1], v_delta[2], v_delta[3], v_delta[4], v_delta[5], v_delta[6], 0, 0, 0)
        ${USAGE_ADD_ON_CONFLICT};
      end loop;
      return null;
    end
    $fn$;

    drop trigger proxy_payments_usage_insert on proxy_payments;
    drop trigger proxy_payments_usage_update on proxy_payments;
    drop trigger proxy_payments_usage_delete on proxy_payments;
    create trigger proxy_payments_usage_insert after insert on proxy_payments
      for each row when (${SETTLED('new')}) execute function usage_daily_row();
    create trigger proxy_payments_usage_update after update on proxy_payments
      for each row
      when ((${SETTLED('old')} or ${SETTLED('new')})
        and (old.state is distinct from new.state or old.credits is distinct from new.credits
          or old.amount_micro_usdc is distinct from new.amount_micro_usdc
          or old.organisation_id is distinct from new.organisation_id or old.api_key_id is distinct from new.api_key_id
          or old.created_at is distinct from new.created_at or old.target_host is distinct from new.target_host))
      execute function usage_daily_row();
    create trigger proxy_payments_usage_delete after delete on proxy_payments
      for each row when (${SETTLED('old')}) execute function usage_daily_row();

    update usage_daily set pending_payments = 0, pending_credits = 0, pending_amount_micro_usdc = 0
      where pending_payments <> 0 or pending_credits <> 0 or pending_amount_micro_usdc <> 0;
  `,
    )
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // The triggers and function as they were (created again by the migration that made them, once
  // this function is out of its way); the open payments counted again as pending.
  await sql`alter function usage_daily_row() rename to usage_daily_settled_row`.execute(db);
  await usageDailyRowsUp(db);
  await sql`drop function usage_daily_settled_row()`.execute(db);
  await sql`
    insert into usage_daily as u
      select organisation_id, (created_at at time zone 'UTC')::date, api_key_id, coalesce(target_host, ''),
        0, 0, 0, 0, 0, 0, count(*), sum(credits), sum(amount_micro_usdc)
      from proxy_payments where state in ('reserved', 'signed')
      group by 1, 2, 3, 4
    ${sql.raw(USAGE_ADD_ON_CONFLICT)}
  `.execute(db);
}
