import { sql, type Kysely } from 'kysely';

/**
 * The daily usage summary's triggers (2026_11_28_0017_usage_daily) read the statement's transition
 * tables directly, and only the columns the summary sums: they no longer copy every changed row
 * whole (its signed payment included) into arrays for usage_daily_apply, which was most of their
 * cost on every /proxy payment. Same rules: what a statement inserted is added, what it deleted
 * subtracted, an update subtracts the rows as they were and adds them as they are; each summary
 * row written once per statement, in the order of its key; rows that net to nothing write nothing.
 * usage_daily_apply stays for the migration's backfill.
 */
const change = (from: string, sign: 1 | -1) => `
  select organisation_id, (created_at at time zone 'UTC')::date as day, api_key_id,
         coalesce(target_host, '') as target_host,
         case when state in ('reserved', 'signed') then 'pending' else state end as bucket,
         ${sign} as sign, credits, amount_micro_usdc
  from ${from}`;

/** An insert into usage_daily whose key exists adds to its sums (also used by later migrations). */
export const USAGE_ADD_ON_CONFLICT = `on conflict (organisation_id, day, api_key_id, target_host) do update set
    charged_payments = u.charged_payments + excluded.charged_payments,
    charged_credits = u.charged_credits + excluded.charged_credits,
    charged_amount_micro_usdc = u.charged_amount_micro_usdc + excluded.charged_amount_micro_usdc,
    released_payments = u.released_payments + excluded.released_payments,
    released_credits = u.released_credits + excluded.released_credits,
    released_amount_micro_usdc = u.released_amount_micro_usdc + excluded.released_amount_micro_usdc,
    pending_payments = u.pending_payments + excluded.pending_payments,
    pending_credits = u.pending_credits + excluded.pending_credits,
    pending_amount_micro_usdc = u.pending_amount_micro_usdc + excluded.pending_amount_micro_usdc`;

const apply = (changes: string) => `
  insert into usage_daily as u
  select organisation_id, day, api_key_id, target_host,
    coalesce(sum(sign) filter (where bucket = 'charged'), 0)::bigint,
    coalesce(sum(sign * credits) filter (where bucket = 'charged'), 0)::bigint,
    coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'charged'), 0)::bigint,
    coalesce(sum(sign) filter (where bucket = 'released'), 0)::bigint,
    coalesce(sum(sign * credits) filter (where bucket = 'released'), 0)::bigint,
    coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'released'), 0)::bigint,
    coalesce(sum(sign) filter (where bucket = 'pending'), 0)::bigint,
    coalesce(sum(sign * credits) filter (where bucket = 'pending'), 0)::bigint,
    coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'pending'), 0)::bigint
  from (${changes}) change
  group by organisation_id, day, api_key_id, target_host
  having (coalesce(sum(sign) filter (where bucket = 'charged'), 0),
          coalesce(sum(sign * credits) filter (where bucket = 'charged'), 0),
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'charged'), 0),
          coalesce(sum(sign) filter (where bucket = 'released'), 0),
          coalesce(sum(sign * credits) filter (where bucket = 'released'), 0),
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'released'), 0),
          coalesce(sum(sign) filter (where bucket = 'pending'), 0),
          coalesce(sum(sign * credits) filter (where bucket = 'pending'), 0),
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'pending'), 0))
         <> (0, 0, 0, 0, 0, 0, 0, 0, 0)
  order by organisation_id, day, api_key_id, target_host
  ${USAGE_ADD_ON_CONFLICT}`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    create or replace function usage_daily_follow() returns trigger
    language plpgsql as $fn$
    begin
      if tg_op = 'INSERT' then
        ${apply(change('added', 1))};
      elsif tg_op = 'DELETE' then
        ${apply(change('removed', -1))};
      else
        ${apply(`${change('added', 1)} union all ${change('removed', -1)}`)};
      end if;
      return null;
    end
    $fn$;`,
    )
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    create or replace function usage_daily_follow() returns trigger
    language plpgsql as $fn$
    begin
      if tg_op = 'INSERT' then
        perform usage_daily_apply(array(select row(a.*)::proxy_payments from added a), '{}');
      elsif tg_op = 'DELETE' then
        perform usage_daily_apply('{}', array(select row(r.*)::proxy_payments from removed r));
      else
        perform usage_daily_apply(
          array(select row(a.*)::proxy_payments from added a),
          array(select row(r.*)::proxy_payments from removed r));
      end if;
      return null;
    end
    $fn$;
  `.execute(db);
}
