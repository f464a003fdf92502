import { sql, type Kysely } from 'kysely';
import { USAGE_ADD_ON_CONFLICT } from './2026_11_30_0024_usage_daily_direct';

/**
 * The daily usage summary (2026_11_28_0017_usage_daily) follows each changed row rather than each
 * statement: row-level triggers, the update trigger only when a column the summary sums or groups
 * by changed (a transaction hash or a webhook written is not looked at). A statement-level trigger
 * gathered its rows into transition tables, whole (the signed payment included), and summed them
 * with a grouped insert on every /proxy write: most of the database's cost of a payment's summary.
 * The rules are the same: an insert adds its row to the bucket of its state (pending: reserved or
 * signed; charged; released), a delete subtracts it, an update subtracts the row as it was and
 * adds it as it is: one summary row written when both fall on the same day, key and host (as every
 * move of our payment functions does), two otherwise. A change that nets to nothing writes nothing.
 *
 * The finality trigger of proxy_payments (2026_11_29_0017_finality_watches) is called only when
 * its function would open a watch.
 */
const BUCKET = (row: 'old' | 'new') =>
  `case when ${row}.state in ('reserved', 'signed') then 'pending' else ${row}.state end`;

/** The summary's buckets, in the order of its columns. */
type UsageBucket = 'charged' | 'released' | 'pending';
const USAGE_BUCKETS: readonly UsageBucket[] = ['charged', 'released', 'pending'];

/**
 * The trigger function's statements that take the row as it was (`old`) or as it is (`new`), with
 * its summary key; `bucket` names the row's bucket (null: counted in none).
 */
const TAKE = (row: 'old' | 'new', bucket: (row: 'old' | 'new') => string) =>
  [
    `v_${row}_bucket := ${bucket(row)};`,
    `v_${row}_credits := ${row}.credits;`,
    `v_${row}_amount := ${row}.amount_micro_usdc;`,
    `v_organisation_id := ${row}.organisation_id;`,
    `v_day := (${row}.created_at at time zone 'UTC')::date;`,
    `v_api_key_id := ${row}.api_key_id;`,
    `v_host := ${row}.target_host;`,
  ].join(' ');

/** The trigger function's variables of the summary row's key. */
const USAGE_ROW_KEY = `      v_same_key boolean := tg_op = 'UPDATE'
        and old.organisation_id = new.organisation_id and old.api_key_id = new.api_key_id
        and (old.created_at at time zone 'UTC')::date = (new.created_at at time zone 'UTC')::date
        and old.target_host is not distinct from new.target_host;
      -- The summary row's key: the payment's organisation, UTC day, key and host.
      v_organisation_id bigint;
      v_day date;
      v_api_key_id bigint;
      v_host text;`;

/** The three deltas of one bucket (payments, credits, micro-USDC) in the trigger function's array. */
const bucketDelta = (bucket: UsageBucket) =>
  [
    `(v_new_bucket is not distinct from '${bucket}')::int - (v_old_bucket is not distinct from '${bucket}')::int`,
    `case when v_new_bucket = '${bucket}' then v_new_credits else 0 end - case when v_old_bucket = '${bucket}' then v_old_credits else 0 end`,
    `case when v_new_bucket = '${bucket}' then v_new_amount else 0 end - case when v_old_bucket = '${bucket}' then v_old_amount else 0 end`,
  ]
    .map((line) => `          ${line}`)
    .join(',\n');

/**
 * The body of the trigger function usage_daily_row (from `declare` to its closing `$fn$;`): each
 * changed row subtracted from the summary row of its bucket as it was and added to the one as it
 * is (also used by later migrations, with fewer buckets: a column of a bucket not summed stays 0).
 */
export function usageRowBody(
  bucket: (row: 'old' | 'new') => string,
  buckets: readonly UsageBucket[] = USAGE_BUCKETS,
): string {
  // The summary's columns, bucket by bucket: the deltas of a bucket summed, zeros for one that is not.
  const columns = USAGE_BUCKETS.map((column) => {
    const at = buckets.indexOf(column) * 3;
    return at < 0 ? '0, 0, 0' : [1, 2, 3].map((k) => `v_delta[${at + k}]`).join(', ');
  }).join(', ');
  return `    declare
${USAGE_ROW_KEY}
      -- The row as it was (subtracted) and as it is (added): each bucket, credits and micro-USDC.
      v_old_bucket text;
      v_old_credits bigint;
      v_old_amount bigint;
      v_new_bucket text;
      v_new_credits bigint;
      v_new_amount bigint;
      v_delta bigint[];
    begin
      -- One summary row, or two when an update moved the payment to another day, key or host.
      for v_part in 1 .. case when tg_op = 'UPDATE' and not v_same_key then 2 else 1 end loop
        v_old_bucket := null; v_old_credits := 0; v_old_amount := 0;
        v_new_bucket := null; v_new_credits := 0; v_new_amount := 0;
        if tg_op <> 'INSERT' and (v_part = 1) then
          ${TAKE('old', bucket)}
        end if;
        if tg_op <> 'DELETE' and (v_same_key or tg_op = 'INSERT' or v_part = 2) then
          ${TAKE('new', bucket)}
        end if;
        -- Per bucket (${buckets.join(', ')}): payments, credits, micro-USDC.
        v_delta := array[
${buckets.map(bucketDelta).join(',\n')}];
        continue when v_delta = '{${buckets.flatMap(() => [0, 0, 0]).join(',')}}';
        insert into usage_daily as u values (
          v_organisation_id, v_day, v_api_key_id, coalesce(v_host, ''),
          ${columns})
        ${USAGE_ADD_ON_CONFLICT};
      end loop;
      return null;
    end
    $fn$;`;
}

/** The summary follows an update only when a column it sums or groups by changed (also used by later migrations). */
export const USAGE_UPDATE_TRIGGER = `
  create trigger proxy_payments_usage_update after update on proxy_payments
    for each row
    when (old.state is distinct from new.state or old.credits is distinct from new.credits
      or old.amount_micro_usdc is distinct from new.amount_micro_usdc
      or old.organisation_id is distinct from new.organisation_id or old.api_key_id is distinct from new.api_key_id
      or old.created_at is distinct from new.created_at or old.target_host is distinct from new.target_host)
    execute function usage_daily_row();`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    create function usage_daily_row() returns trigger language plpgsql as $fn$
${usageRowBody(BUCKET)}

    drop trigger proxy_payments_usage_insert on proxy_payments;
    drop trigger proxy_payments_usage_update on proxy_payments;
    drop trigger proxy_payments_usage_delete on proxy_payments;
    create trigger proxy_payments_usage_insert after insert on proxy_payments
      for each row execute function usage_daily_row();
    ${USAGE_UPDATE_TRIGGER}
    create trigger proxy_payments_usage_delete after delete on proxy_payments
      for each row execute function usage_daily_row();

    drop trigger proxy_payments_finality on proxy_payments;
    create trigger proxy_payments_finality
      after update of state on proxy_payments
      for each row when (new.state = 'charged' and new.tx_hash is not null)
      execute function watch_proxy_finality();
  `,
    )
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop trigger proxy_payments_finality on proxy_payments;
    create trigger proxy_payments_finality
      after update of state on proxy_payments
      for each row execute function watch_proxy_finality();

    drop trigger proxy_payments_usage_delete on proxy_payments;
    drop trigger proxy_payments_usage_update on proxy_payments;
    drop trigger proxy_payments_usage_insert on proxy_payments;
    create trigger proxy_payments_usage_insert after insert on proxy_payments
      referencing new table as added for each statement execute function usage_daily_follow();
    create trigger proxy_payments_usage_update after update on proxy_payments
      referencing old table as removed new table as added for each statement execute function usage_daily_follow();
    create trigger proxy_payments_usage_delete after delete on proxy_payments
      referencing old table as removed for each statement execute function usage_daily_follow();
    drop function usage_daily_row();
  `.execute(db);
}
