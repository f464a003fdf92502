-- A daily counter moves only while it stays within its limit: an insert of the day's row or an
-- update whose WHERE holds the limit, so concurrent calls never overshoot (admit_relay_payment for
-- the relay counters, reserve_credits for each of its counters). The counter is the column of the
-- scope's unit: spent_micro_usdc for relay scopes, spent_credits for the others (the check
-- daily_spend_one_unit); `spent` is the counter in that unit. Two static statements, one per
-- unit, rather than one built at run time: they are planned once per session.
create or replace function try_add_spend(
  p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint, p_limit bigint,
  out admitted boolean, out spent bigint
) language plpgsql as $fn$
declare
  v_micro_usdc boolean := p_scope in ('relay_wallet', 'relay_system');
begin
  if p_amount is null or p_amount < 0 then
    raise exception 'spend amount must not be negative' using errcode = '22023';
  end if;
  if p_amount <= p_limit then
    if v_micro_usdc then
      insert into daily_spend as d (scope, scope_id, network_class, day, spent_micro_usdc)
        values (p_scope, p_scope_id, p_network_class, p_day, p_amount)
        on conflict (scope, scope_id, network_class, day)
        do update set spent_micro_usdc = d.spent_micro_usdc + excluded.spent_micro_usdc
        where d.spent_micro_usdc + excluded.spent_micro_usdc <= p_limit
        returning d.spent_micro_usdc into spent;
    else
      insert into daily_spend as d (scope, scope_id, network_class, day, spent_credits)
        values (p_scope, p_scope_id, p_network_class, p_day, p_amount)
        on conflict (scope, scope_id, network_class, day)
        do update set spent_credits = d.spent_credits + excluded.spent_credits
        where d.spent_credits + excluded.spent_credits <= p_limit
        returning d.spent_credits into spent;
    end if;
    if spent is not null then
      admitted := true;
      return;
    end if;
  end if;
  -- Refused: the counter as it stands (zero when there is none yet).
  admitted := false;
  select case when v_micro_usdc then d.spent_micro_usdc else d.spent_credits end into spent
    from daily_spend d
    where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
  spent := coalesce(spent, 0);
end
$fn$;
