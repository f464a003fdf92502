import { sql, type Kysely } from 'kysely';

/**
 * A daily counter names its unit: relay counters (relay_wallet, relay_system) count micro-USDC in
 * spent_micro_usdc, proxy and API key counters (proxy_account, proxy_system, api_key) count
 * credits in spent_credits. The column of the other unit stays zero (a check), so no reader can
 * take one unit for the other. Every row keeps its amount exactly (bigint to bigint).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table daily_spend
      add column spent_micro_usdc bigint not null default 0 check (spent_micro_usdc >= 0),
      add column spent_credits bigint not null default 0 check (spent_credits >= 0);
    update daily_spend set
      spent_micro_usdc = case when scope in ('relay_wallet', 'relay_system') then spent else 0 end,
      spent_credits = case when scope in ('relay_wallet', 'relay_system') then 0 else spent end;
    alter table daily_spend
      add constraint daily_spend_one_unit check (
        case when scope in ('relay_wallet', 'relay_system') then spent_credits = 0 else spent_micro_usdc = 0 end),
      drop column spent;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table daily_spend add column spent bigint not null default 0 check (spent >= 0);
    update daily_spend set spent = spent_micro_usdc + spent_credits;
    alter table daily_spend drop constraint daily_spend_one_unit, drop column spent_micro_usdc, drop column spent_credits;
  `.execute(db);
}
