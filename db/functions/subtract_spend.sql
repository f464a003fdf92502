-- Takes an amount back off a daily counter, never below zero (a payment that never settled, a
-- released reservation).
create or replace function subtract_spend(p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint)
returns void language sql as $fn$
  update daily_spend d set spent = greatest(d.spent - p_amount, 0)
    where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
$fn$;
