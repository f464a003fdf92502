-- Holds credits for a proxy payment in one round trip: the organisation balance, the key's daily
-- cap, the account's and the system's daily limits of the network class, all or nothing; then its
-- ledger entry. The reservation is the payment's row, written by the caller in the same statement
-- (holdProxyPayment in payments/proxy/records.ts) with the network class and day the counters
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
  -- proxy limits of the network class. 'system' is SYSTEM_SCOPE_ID of payments/limits.ts.
  v_scopes text[] := array['api_key', 'proxy_account', 'proxy_system'];
  v_scope_ids text[] := array[p_api_key_id::text, p_account_id::text, 'system'];
  v_classes text[] := array['all', p_network_class, p_network_class];
  v_limits bigint[] := array[p_key_daily_cap, p_account_daily_limit, p_system_daily_limit];
  v_reasons text[] := array['key_daily_cap', 'account_daily_limit', 'system_daily_limit'];
  v_balance bigint;  -- the balance before this reservation
  v_moved text[];    -- the scopes of the counters that admitted the credits
  v_inserted text[]; -- of those, the counters this reservation wrote first
  v_refused integer;
  v_spent bigint;
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
  -- The three counters in one statement, in lock order: each moves only when it stays within its
  -- limit (as try_add_spend moves one).
  with moved as (
    insert into daily_spend as d (scope, scope_id, network_class, day, spent_credits)
      select c.scope, c.scope_id, c.network_class, p_day, p_credits
        from unnest(v_scopes, v_scope_ids, v_classes, v_limits) with ordinality as c(scope, scope_id, network_class, limit_credits, i)
        where p_credits <= c.limit_credits
        order by c.i
      on conflict (scope, scope_id, network_class, day) do update
        set spent_credits = d.spent_credits + excluded.spent_credits
        where d.spent_credits + excluded.spent_credits
          <= v_limits[array_position(v_scopes, excluded.scope::text)]
      returning d.scope::text as scope, d.xmax = 0 as inserted
  )
  select array_agg(m.scope), array_agg(m.scope) filter (where m.inserted) into v_moved, v_inserted from moved m;
  if coalesce(cardinality(v_moved), 0) < 3 then
    -- Refused: the first counter that did not admit. What moved is taken back in this transaction
    -- (no subtransaction on the way that admits), so nothing of the reservation stays: a counter
    -- it wrote first is removed, one that was there is given the credits back.
    v_refused := (select min(c.i) from unnest(v_scopes) with ordinality as c(scope, i)
                  where not (c.scope = any (coalesce(v_moved, '{}'))));
    update organisations o set credit_balance = o.credit_balance + p_credits where o.id = p_organisation_id;
    for i in 1 .. 3 loop
      if v_scopes[i] = any (coalesce(v_inserted, '{}')) then
        delete from daily_spend d
          where d.scope = v_scopes[i] and d.scope_id = v_scope_ids[i] and d.network_class = v_classes[i] and d.day = p_day;
      elsif v_scopes[i] = any (coalesce(v_moved, '{}')) then
        perform subtract_spend(v_scopes[i], v_scope_ids[i], v_classes[i], p_day, p_credits);
      end if;
    end loop;
    select d.spent_credits into v_spent from daily_spend d
      where d.scope = v_scopes[v_refused] and d.scope_id = v_scope_ids[v_refused]
        and d.network_class = v_classes[v_refused] and d.day = p_day;
    return query select false, v_reasons[v_refused], coalesce(v_spent, 0), v_limits[v_refused], v_balance;
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
