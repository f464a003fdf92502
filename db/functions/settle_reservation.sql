-- reserved -> charged | released, once (RESERVATION_MOVES in payments/reservationStates.ts; the
-- from-state in the WHERE below is the table's, test/db/state-tables.test.ts checks it). A
-- release gives back the balance and the daily counters; either way a ledger entry.
create or replace function settle_reservation(p_reference text, p_to text) returns boolean
language plpgsql as $fn$
#variable_conflict use_column
declare
  r credit_reservations;
begin
  if p_to is null or p_to not in ('charged', 'released') then
    raise exception 'a reservation is settled as charged or released, not %', p_to using errcode = '22023';
  end if;
  update credit_reservations c set state = p_to, settled_at = now()
    where c.reference = p_reference and c.state = 'reserved'
    returning c.* into r;
  if not found then
    return false;
  end if;
  if p_to = 'released' then
    update organisations o set credit_balance = o.credit_balance + r.credits where o.id = r.organisation_id;
    perform subtract_spend('api_key', r.api_key_id::text, 'all', r.day, r.credits);
    perform subtract_spend('proxy_account', r.account_id::text, r.network_class, r.day, r.credits);
    perform subtract_spend('proxy_system', 'system', r.network_class, r.day, r.credits);
  end if;
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
    values (r.organisation_id, r.account_id, r.api_key_id, case p_to when 'charged' then 'charge' else 'release' end, r.credits, r.reference);
  return true;
end
$fn$;
