import { sql, type Kysely } from 'kysely';

/**
 * The daily summary GET /v1/usage reads: per organisation, UTC day (of created_at), key and target
 * host, the count, credits and micro-USDC of its /proxy payments by where their credits went
 * (charged; released; pending: reserved or signed). It is kept by the writes themselves: triggers
 * on proxy_payments add what each statement inserted, subtract what it deleted, and for an update
 * subtract the rows as they were and add them as they are, in the statement's own transaction. So
 * any change of a payment (its state, amount, credits, day, key or target), whoever makes it,
 * moves the summary with it, and the summary always equals the sums over proxy_payments. A
 * statement whose rows net to nothing (a transaction hash written, a webhook opened) writes no
 * summary row. The triggers are statement-level (transition tables): a statement of many rows
 * writes each summary row once, in the order of the key, so that two writers lock them in the same
 * order. The existing payments are summed here by the same function, 50,000 at a time, with the table
 * locked against writes meanwhile.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table usage_daily (
      organisation_id bigint not null,
      day date not null,
      api_key_id bigint not null,
      target_host text not null,
      charged_payments bigint not null default 0,
      charged_credits bigint not null default 0,
      charged_amount_micro_usdc bigint not null default 0,
      released_payments bigint not null default 0,
      released_credits bigint not null default 0,
      released_amount_micro_usdc bigint not null default 0,
      pending_payments bigint not null default 0,
      pending_credits bigint not null default 0,
      pending_amount_micro_usdc bigint not null default 0,
      primary key (organisation_id, day, api_key_id, target_host)
    );

    create function usage_daily_apply(p_added proxy_payments[], p_removed proxy_payments[]) returns void
    language sql as $fn$
      with change as (
        select organisation_id, (created_at at time zone 'UTC')::date as day, api_key_id,
               coalesce(target_host, '') as target_host,
               case when state in ('reserved', 'signed') then 'pending' else state end as bucket,
               sign, credits, amount_micro_usdc
        from (
          select *, 1 as sign from unnest(p_added)
          union all
          select *, -1 as sign from unnest(p_removed)
        ) rows
      ), delta as (
        select organisation_id, day, api_key_id, target_host,
          coalesce(sum(sign) filter (where bucket = 'charged'), 0)::bigint as charged_payments,
          coalesce(sum(sign * credits) filter (where bucket = 'charged'), 0)::bigint as charged_credits,
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'charged'), 0)::bigint as charged_amount_micro_usdc,
          coalesce(sum(sign) filter (where bucket = 'released'), 0)::bigint as released_payments,
          coalesce(sum(sign * credits) filter (where bucket = 'released'), 0)::bigint as released_credits,
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'released'), 0)::bigint as released_amount_micro_usdc,
          coalesce(sum(sign) filter (where bucket = 'pending'), 0)::bigint as pending_payments,
          coalesce(sum(sign * credits) filter (where bucket = 'pending'), 0)::bigint as pending_credits,
          coalesce(sum(sign * amount_micro_usdc) filter (where bucket = 'pending'), 0)::bigint as pending_amount_micro_usdc
        from change
        group by organisation_id, day, api_key_id, target_host
      )
      insert into usage_daily as u
      select * from delta
      where (charged_payments, charged_credits, charged_amount_micro_usdc, released_payments, released_credits,
             released_amount_micro_usdc, pending_payments, pending_credits, pending_amount_micro_usdc)
            <> (0, 0, 0, 0, 0, 0, 0, 0, 0)
      order by organisation_id, day, api_key_id, target_host
      on conflict (organisation_id, day, api_key_id, target_host) do update set
        charged_payments = u.charged_payments + excluded.charged_payments,
        charged_credits = u.charged_credits + excluded.charged_credits,
        charged_amount_micro_usdc = u.charged_amount_micro_usdc + excluded.charged_amount_micro_usdc,
        released_payments = u.released_payments + excluded.released_payments,
        released_credits = u.released_credits + excluded.released_credits,
        released_amount_micro_usdc = u.released_amount_micro_usdc + excluded.released_amount_micro_usdc,
        pending_payments = u.pending_payments + excluded.pending_payments,
        pending_credits = u.pending_credits + excluded.pending_credits,
        pending_amount_micro_usdc = u.pending_amount_micro_usdc + excluded.pending_amount_micro_usdc
    $fn$;

    create function usage_daily_follow() returns trigger
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

    create function usage_daily_empty() returns trigger
    language plpgsql as $fn$
    begin
      delete from usage_daily;
      return null;
    end
    $fn$;

    create trigger proxy_payments_usage_insert after insert on proxy_payments
      referencing new table as added for each statement execute function usage_daily_follow();
    create trigger proxy_payments_usage_update after update on proxy_payments
      referencing old table as removed new table as added for each statement execute function usage_daily_follow();
    create trigger proxy_payments_usage_delete after delete on proxy_payments
      referencing old table as removed for each statement execute function usage_daily_follow();
    create trigger proxy_payments_usage_truncate after truncate on proxy_payments
      for each statement execute function usage_daily_empty();

    lock table proxy_payments in share row exclusive mode;
    do $backfill$
    declare
      last_id bigint := 0;
      upto bigint;
    begin
      loop
        select max(id) into upto from (select id from proxy_payments where id > last_id order by id limit 50000) batch;
        exit when upto is null;
        perform usage_daily_apply(array(select p from proxy_payments p where id > last_id and id <= upto), '{}');
        last_id := upto;
      end loop;
    end
    $backfill$;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop trigger proxy_payments_usage_truncate on proxy_payments;
    drop trigger proxy_payments_usage_delete on proxy_payments;
    drop trigger proxy_payments_usage_update on proxy_payments;
    drop trigger proxy_payments_usage_insert on proxy_payments;
    drop function usage_daily_empty();
    drop function usage_daily_follow();
    drop function usage_daily_apply(proxy_payments[], proxy_payments[]);
    drop table usage_daily;
  `.execute(db);
}
