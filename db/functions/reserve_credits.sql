-- Holds credits for a proxy payment in one round trip: the organisation balance, the key's daily
-- cap, the account's and the system's daily limits of the network class, all or nothing; then the
-- reservation row (reserved, RESERVATION_MOVES in payments/reservationStates.ts) and its ledger
-- entry. Lock order: the organisation row first, then the counters of the key, the account and
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
  -- proxy limits of the network class. 'system' is SYSTEM_SCOPE_ID of payments/limits.ts.
  v_scopes text[] := array['api_key', 'proxy_account', 'proxy_system'];
  v_scope_ids text[] := array[p_api_key_id::text, p_account_id::text, 'system'];
  v_classes text[] := array['all', p_network_class, p_network_class];
  v_limits bigint[] := array[p_key_daily_cap, p_account_daily_limit, p_system_daily_limit];
  v_reasons text[] := array['key_daily_cap', 'account_daily_limit', 'system_daily_limit'];
  v_balance bigint;  -- the balance before this reservation
  v_admitted boolean;
  v_spent bigint;
  v_refused integer;
begin
  if p_credits is null or p_credits <= 0 then
    raise exception 'a reservation must be positive' using errcode = '22023';
  end if;
  -- A subtransaction: a refusal by any counter rolls back the debit and the counters already
  -- moved. Local variables keep their values past the rollback; the refusal reports them.
  begin
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
    for i in 1 .. 3 loop
      select t.admitted, t.spent into v_admitted, v_spent
        from try_add_spend(v_scopes[i], v_scope_ids[i], v_classes[i], p_day, p_credits, v_limits[i]) t;
      if not v_admitted then
        v_refused := i;
        raise exception 'reservation refused: %', v_reasons[i] using errcode = 'PRS01';
      end if;
    end loop;
  exception when sqlstate 'PRS01' then
    return query select false, v_reasons[v_refused], v_spent, v_limits[v_refused], v_balance;
    return;
  end;
  insert into credit_reservations (reference, organisation_id, account_id, api_key_id, network_class, day, credits)
    values (p_reference, p_organisation_id, p_account_id, p_api_key_id, p_network_class, p_day, p_credits);
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
    values (p_organisation_id, p_account_id, p_api_key_id, 'reserve', p_credits, p_reference);
  return query select true, null::text, null::bigint, null::bigint, null::bigint;
end
$fn$;
