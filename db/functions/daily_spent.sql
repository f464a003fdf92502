-- A daily counter as it stands, in its scope's unit (0 when there is none yet): what a refusal by
-- add_spend reports.
create or replace function daily_spent(p_scope text, p_scope_id text, p_network_class text, p_day date)
returns bigint language sql stable as $fn$
  select coalesce((select d.spent_micro_usdc + d.spent_credits from daily_spend d
    where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day), 0);
$fn$;
