-- Counts an upto permit's maximum (micro-USDC) as open against the paying wallet's bound and the
-- whole service's (upto_exposure, migration 2026_12_01_0035_upto_exposure), each only while it
-- stays within its bound, in one `insert ... on conflict do update ... where` statement per
-- counter, so concurrent admissions never overshoot. Lock order: the wallet's counter, then the
-- service's. Used by admit_relay_payment; the counters are taken back by the trigger
-- release_upto_exposure when the permit's row leaves received and settling.
--
-- Returns null when both moved; else 'wallet' or 'total', the bound that refused, with what this
-- call moved taken back (so nothing of it stays, without a subtransaction).
create or replace function add_upto_exposure(
  p_payer text,
  p_class text,
  p_wallet_limit bigint,
  p_total_limit bigint,
  p_amount bigint
) returns text language plpgsql as $fn$
begin
  if p_amount is null or p_amount < 0 then
    raise exception 'exposure amount must not be negative' using errcode = '22023';
  end if;
  insert into upto_exposure as e (scope, scope_id, network_class, open_micro)
    select 'wallet', p_payer, p_class, p_amount where p_amount <= p_wallet_limit
    on conflict (scope, scope_id, network_class) do update
      set open_micro = e.open_micro + excluded.open_micro
      where e.open_micro + excluded.open_micro <= p_wallet_limit;
  if not found then
    return 'wallet';
  end if;
  insert into upto_exposure as e (scope, scope_id, network_class, open_micro)
    select 'total', 'system', p_class, p_amount where p_amount <= p_total_limit
    on conflict (scope, scope_id, network_class) do update
      set open_micro = e.open_micro + excluded.open_micro
      where e.open_micro + excluded.open_micro <= p_total_limit;
  if not found then
    update upto_exposure e set open_micro = e.open_micro - p_amount
      where e.scope = 'wallet' and e.scope_id = p_payer and e.network_class = p_class;
    delete from upto_exposure e
      where e.scope = 'wallet' and e.scope_id = p_payer and e.network_class = p_class and e.open_micro = 0;
    return 'total';
  end if;
  return null;
end
$fn$;
