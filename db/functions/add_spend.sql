-- Moves daily counters together, each only while it stays within its own limit, in one
-- `insert ... on conflict do update ... where` statement in the order given (the callers' lock
-- order), so concurrent calls never overshoot. The amount is in the scopes' unit (SPEND_COLUMN of
-- payments/accounts/limits.ts: micro-USDC for relay scopes, credits for the others; the other column stays
-- zero, the check daily_spend_one_unit, so their sum is the counter). The scopes of one call are
-- distinct. Used by reserve_credits and admit_relay_payment.
--
-- Returns the position of the first counter that did not admit, null when every one moved. Then
-- what this call moved is taken back in the caller's transaction (a counter it wrote first is
-- removed, one that was there is given the amount back), so nothing of it stays and the way that
-- admits needs no subtransaction. One value, so a caller's `v := add_spend(...)` is evaluated
-- without a query of its own; daily_spent reads the refusing counter.
create or replace function add_spend(
  p_scopes text[],
  p_scope_ids text[],
  p_classes text[],
  p_limits bigint[],
  p_day date,
  p_amount bigint
) returns integer language plpgsql as $fn$
declare
  v_refused integer;
  v_moved text[];    -- the scopes of the counters that admitted the amount
  v_inserted text[]; -- of those, the counters this call wrote first
begin
  if p_amount is null or p_amount < 0 then
    raise exception 'spend amount must not be negative' using errcode = '22023';
  end if;
  with moved as (
    insert into daily_spend as d (scope, scope_id, network_class, day, spent_micro_usdc, spent_credits)
      select c.scope, c.scope_id, c.network_class, p_day,
             case when c.scope in ('relay_wallet', 'relay_system') then p_amount else 0 end,
             case when c.scope in ('relay_wallet', 'relay_system') then 0 else p_amount end
        from unnest(p_scopes, p_scope_ids, p_classes, p_limits) with ordinality as c(scope, scope_id, network_class, limit_amount, i)
        where p_amount <= c.limit_amount
        order by c.i
      on conflict (scope, scope_id, network_class, day) do update
        set spent_micro_usdc = d.spent_micro_usdc + excluded.spent_micro_usdc,
            spent_credits = d.spent_credits + excluded.spent_credits
        where d.spent_micro_usdc + d.spent_credits + p_amount
          <= p_limits[array_position(p_scopes, excluded.scope::text)]
      returning d.scope::text as scope, d.xmax = 0 as inserted
  )
  select array_agg(m.scope), array_agg(m.scope) filter (where m.inserted) into v_moved, v_inserted from moved m;
  if coalesce(cardinality(v_moved), 0) = cardinality(p_scopes) then
    return null;
  end if;
  v_refused := (select min(c.i) from unnest(p_scopes) with ordinality as c(scope, i)
                where not (c.scope = any (coalesce(v_moved, '{}'))));
  for i in 1 .. cardinality(p_scopes) loop
    if p_scopes[i] = any (coalesce(v_inserted, '{}')) then
      delete from daily_spend d
        where d.scope = p_scopes[i] and d.scope_id = p_scope_ids[i] and d.network_class = p_classes[i] and d.day = p_day;
    elsif p_scopes[i] = any (coalesce(v_moved, '{}')) then
      perform subtract_spend(p_scopes[i], p_scope_ids[i], p_classes[i], p_day, p_amount);
    end if;
  end loop;
  return v_refused;
end
$fn$;
