import { sql, type Kysely } from 'kysely';
import { up as usageDailyRowsUp, usageRowBody } from './2026_12_01_0028_usage_daily_rows';
import { USAGE_ADD_ON_CONFLICT } from './2026_11_30_0024_usage_daily_direct';

/**
 * The daily usage summary (usage_daily) keeps only what is settled: charged and released payments.
 * A payment still open (reserved or signed) is counted when the summary is read, from the payment
 * rows themselves (payments/accounts/usage.ts usageReport; proxy_payments_open finds them): they are few and
 * short-lived. The hold of every paid /proxy call then writes no summary row, and its insert runs
 * no trigger: the summary is written once per payment, when it settles, rather than on its hold
 * and again on its charge. The pending columns stay, zero, for instances still running the
 * previous release (they read no pending spend until they are replaced).
 */
const SETTLED = (row: 'old' | 'new') => `${row}.state in ('charged', 'released')`;
/** A row's bucket in the summary: its state once settled, none while open. */
const SETTLED_BUCKET = (row: 'old' | 'new') => `case when ${SETTLED(row)} then ${row}.state end`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    create or replace function usage_daily_row() returns trigger language plpgsql as $fn$
${usageRowBody(SETTLED_BUCKET, ['charged', 'released'])}

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
