-- signed -> charged (PROXY_MOVES in payments/operations/proxy/states.ts; the from-state in the WHERE below is
-- the table's, test/db/state-tables.test.ts checks it): the credits held by the payment are spent,
-- and the webhook record async_processing -> success (WEBHOOK_MOVES), in the caller's statement.
-- The charge's ledger entry is pending finality while the payment has a transaction.
create or replace function charge_proxy_payment(p_reference text, p_tx_hash text, p_outcome text) returns boolean
language plpgsql as $fn$
#variable_conflict use_column
declare
  p proxy_payments;
begin
  update proxy_payments pp
    set state = 'charged', tx_hash = coalesce(p_tx_hash, pp.tx_hash), outcome = p_outcome, settled_at = now()
    where pp.reference = p_reference and pp.state = 'signed'
    returning pp.* into p;
  if not found then
    return false;
  end if;
  -- Committed without waiting for the flush of its WAL (the rest of the caller's transaction too):
  -- what it records is on chain already, and a charge lost with a crash of the database leaves the
  -- payment signed and its credits held, which the sweep (worker/tasks/proxyPaymentSweep.ts) reads
  -- from the chain and charges. The hold, before the payment left, was flushed.
  perform set_config('synchronous_commit', 'off', true);
  -- The charge entry, written pending finality at once when the payment has a transaction. Charged
  -- is settled, not final: the finality watch (payments/tracking/finality.ts) marks the charge final or lost.
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference, finality)
    values (p.organisation_id, p.account_id, p.api_key_id, 'charge', p.credits, p.reference,
            case when p.tx_hash is not null then 'pending' end);
  if p.webhook_id is not null then
    -- Only a record still in flight moves (payments/tracking/webhooks.ts completeWebhook); amounts as usdcText shows them.
    update webhooks w
      set status = 'success',
          tx_hash = nullif(p.tx_hash, ''),
          network = p.network,
          message = 'Payment of ' || trim_scale(p.amount_micro_usdc * 0.000001)::text || ' USDC to the target confirmed on-chain; '
            || p.credits::text || ' credits charged',
          error = null,
          updated_at = now()
      where w.id = p.webhook_id and w.status = 'async_processing';
  end if;
  return true;
end
$fn$;
