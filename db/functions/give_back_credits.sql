-- Gives `p_credits` of the credits a proxy payment holds back: to the organisation's balance, off
-- the daily counters its hold moved (the key's, the account's and the system's, on the day and
-- network class of its row), with a release entry in the ledger. Called by the payment's release
-- and by an upto charge for what the target did not use, in their transaction.
create or replace function give_back_credits(p proxy_payments, p_credits bigint) returns void
language plpgsql as $fn$
begin
  if p.network_class is null or p.spend_day is null then
    raise exception 'proxy payment %: no network class or day of its hold to give credits back on', p.id;
  end if;
  update organisations o set credit_balance = o.credit_balance + p_credits where o.id = p.organisation_id;
  perform subtract_spend('api_key', p.api_key_id::text, 'all', p.spend_day, p_credits);
  perform subtract_spend('proxy_account', p.account_id::text, p.network_class, p.spend_day, p_credits);
  perform subtract_spend('proxy_system', 'system', p.network_class, p.spend_day, p_credits);
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
    values (p.organisation_id, p.account_id, p.api_key_id, 'release', p_credits, p.reference);
end
$fn$;
