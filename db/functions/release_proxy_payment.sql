-- reserved | signed -> released (PROXY_MOVES in payments/operations/proxy/states.ts; the from-states in the
-- WHERE below are the table's, test/db/state-tables.test.ts checks them): the credits held go back
-- to the balance and off the daily counters, and the webhook record async_processing ->
-- payment_failed (WEBHOOK_MOVES).
create or replace function release_proxy_payment(p_reference text, p_outcome text) returns boolean
language plpgsql as $fn$
#variable_conflict use_column
declare
  p proxy_payments;
begin
  update proxy_payments pp
    set state = 'released', outcome = p_outcome, settled_at = now()
    where pp.reference = p_reference and pp.state in ('reserved', 'signed')
    returning pp.* into p;
  if not found then
    return false;
  end if;
  perform give_back_credits(p, coalesce(p.reserved_credits, p.credits));
  if p.webhook_id is not null then
    update webhooks w
      set status = 'payment_failed',
          tx_hash = null,
          network = p.network,
          message = 'Nothing was paid; ' || p.credits::text || ' reserved credits were released',
          error = 'The payment to the target was not settled on-chain: ' || p_outcome,
          updated_at = now()
      where w.id = p.webhook_id and w.status = 'async_processing';
  end if;
  return true;
end
$fn$;
