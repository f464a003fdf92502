-- A daily counter moves only while it stays within its limit: an insert of the day's row or an
-- update whose WHERE holds the limit, so concurrent calls never overshoot (payments/limits.ts
-- tryAddSpend, and reserve_credits for each of its counters).
create or replace function try_add_spend(
  p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint, p_limit bigint,
  out admitted boolean, out spent bigint
) language plpgsql as $fn$
#variable_conflict use_column
begin
  if p_amount is null or p_amount < 0 then
    raise exception 'spend amount must not be negative' using errcode = '22023';
  end if;
  if p_amount <= p_limit then
    insert into daily_spend as d (scope, scope_id, network_class, day, spent)
    values (p_scope, p_scope_id, p_network_class, p_day, p_amount)
    on conflict (scope, scope_id, network_class, day)
    do update set spent = d.spent + excluded.spent
    where d.spent + excluded.spent <= p_limit
    returning d.spent into spent;
    if found then
      admitted := true;
      return;
    end if;
  end if;
  -- Refused: the counter as it stands (zero when there is none yet).
  admitted := false;
  select d.spent into spent from daily_spend d
    where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
  spent := coalesce(spent, 0);
end
$fn$;
