-- Takes an amount back off a daily counter, never below zero (a payment that never settled, a
-- released reservation). The amount is in the scope's unit, so only that column moves.
create or replace function subtract_spend(p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint)
returns void language sql as $fn$
  update daily_spend d set
      spent_micro_usdc = case when d.scope in ('relay_wallet', 'relay_system') then greatest(d.spent_micro_usdc - p_amount, 0) else d.spent_micro_usdc end,
      spent_credits = case when d.scope in ('relay_wallet', 'relay_system') then d.spent_credits else greatest(d.spent_credits - p_amount, 0) end
    where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
$fn$;
