-- Holds credits for a proxy payment in one round trip: the organisation balance, the key's daily
-- cap, the account's and the system's daily limits of the network class, all or nothing; then its
-- ledger entry. The reservation is the payment's row, written by the caller in the same statement
-- (holdProxyPayment in payments/operations/proxy/records.ts) with the network class and day the counters
-- moved on. Lock order: the organisation row first, then the counters of the key, the account and
-- the system, in that order.
create or replace function reserve_credits(
  p_reference text,
  p_organisation_id bigint,
  p_account_id bigint,
  p_api_key_id bigint,
  p_key_daily_cap bigint,
  p_network_class text,
  p_day date,
  p_credits bigint,
  p_account_daily_limit bigint,
  p_system_daily_limit bigint
) returns table (reserved boolean, reason text, spent_credits bigint, limit_credits bigint, balance_credits bigint)
language plpgsql as $fn$
#variable_conflict use_column
declare
  -- The counters, in lock order: the key's daily cap, the account's and the system's daily
  -- proxy limits of the network class. 'system' is SYSTEM_SCOPE_ID of payments/accounts/limits.ts.
  v_scopes text[] := array['api_key', 'proxy_account', 'proxy_system'];
  v_scope_ids text[] := array[p_api_key_id::text, p_account_id::text, 'system'];
  v_classes text[] := array['all', p_network_class, p_network_class];
  v_limits bigint[] := array[p_key_daily_cap, p_account_daily_limit, p_system_daily_limit];
  v_reasons text[] := array['key_daily_cap', 'account_daily_limit', 'system_daily_limit'];
  v_balance bigint; -- the balance before this reservation
  v_refused integer;
begin
  if p_credits is null or p_credits <= 0 then
    raise exception 'a reservation must be positive' using errcode = '22023';
  end if;
  -- The organisation row is locked first by every reservation, so counters are taken in one order.
  update organisations o set credit_balance = o.credit_balance - p_credits
    where o.id = p_organisation_id and o.credit_balance >= p_credits
    returning o.credit_balance + p_credits into v_balance;
  if not found then
    select o.credit_balance into v_balance from organisations o where o.id = p_organisation_id;
    v_balance := coalesce(v_balance, 0);
    return query select false, 'insufficient_credits'::text, 0::bigint, v_balance, v_balance;
    return;
  end if;
  -- The three counters together (add_spend): when one refuses, what moved is taken back in this
  -- transaction, so nothing of the reservation stays.
  v_refused := add_spend(v_scopes, v_scope_ids, v_classes, v_limits, p_day, p_credits);
  if v_refused is not null then
    update organisations o set credit_balance = o.credit_balance + p_credits where o.id = p_organisation_id;
    return query select false, v_reasons[v_refused],
      daily_spent(v_scopes[v_refused], v_scope_ids[v_refused], v_classes[v_refused], p_day), v_limits[v_refused], v_balance;
    return;
  end if;
  -- The payment row of a caller of the previous release names neither the network class nor the
  -- day: its columns' defaults read them from here (db/migrations/..._reservations_on_payments).
  perform set_config('prs.reserved_network_class', p_network_class, true), set_config('prs.reserved_day', p_day::text, true);
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
    values (p_organisation_id, p_account_id, p_api_key_id, 'reserve', p_credits, p_reference);
  return query select true, null::text, null::bigint, null::bigint, null::bigint;
end
$fn$;
