-- An upto payment: signed -> charged (PROXY_MOVES in payments/proxy/states.ts, as
-- charge_proxy_payment) for what the target settled: the payment's amount and credits become the
-- used amount and the credits charged for it (never more than the reservation), the reservation is
-- charged for those credits and the rest released (balance and daily counters given back, a
-- release entry in the ledger), and the webhook record async_processing -> success, in the
-- caller's statement. The charge's ledger entry is pending finality while the payment has a
-- transaction.
create or replace function charge_proxy_payment_used(
  p_reference text, p_tx_hash text, p_outcome text, p_used_micro bigint, p_charged_credits bigint
) returns boolean
language plpgsql as $fn$
#variable_conflict use_column
declare
  p proxy_payments;
  r credit_reservations;
  v_released bigint;
begin
  if p_used_micro is null or p_used_micro <= 0 or p_charged_credits is null or p_charged_credits <= 0 then
    raise exception 'an upto charge is of a positive amount and positive credits' using errcode = '22023';
  end if;
  update proxy_payments pp
    set state = 'charged', tx_hash = coalesce(p_tx_hash, pp.tx_hash), outcome = p_outcome, settled_at = now(),
        amount_micro_usdc = p_used_micro, credits = p_charged_credits
    where pp.reference = p_reference and pp.state = 'signed' and pp.scheme = 'upto'
      and p_used_micro <= pp.max_amount_micro_usdc and p_charged_credits <= pp.reserved_credits
    returning pp.* into p;
  if not found then
    if exists (select 1 from proxy_payments pp where pp.reference = p_reference and pp.state = 'signed'
               and (pp.scheme <> 'upto' or p_used_micro > pp.max_amount_micro_usdc or p_charged_credits > pp.reserved_credits)) then
      raise exception 'proxy payment %: an upto charge of % micro-USDC and % credits is above its maximum, or it is not upto',
        p_reference, p_used_micro, p_charged_credits using errcode = '22023';
    end if;
    return false;
  end if;
  -- Committed without waiting for the flush of its WAL (the rest of the caller's transaction too):
  -- what it records is on chain already, and a charge lost with a crash of the database leaves the
  -- payment signed and its credits held, which the sweep (worker/tasks/proxyPaymentSweep.ts) reads
  -- from the chain and charges. The hold, before the payment left, was flushed.
  perform set_config('synchronous_commit', 'off', true);
  update credit_reservations c set state = 'charged', settled_at = now()
    where c.reference = p_reference and c.state = 'reserved'
    returning c.* into r;
  if not found then
    raise exception 'proxy payment %: its reservation was already settled', p.id;
  end if;
  v_released := r.credits - p_charged_credits;
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference, finality)
    values (r.organisation_id, r.account_id, r.api_key_id, 'charge', p_charged_credits, r.reference,
            case when p.tx_hash is not null then 'pending' end);
  if v_released > 0 then
    update organisations o set credit_balance = o.credit_balance + v_released where o.id = r.organisation_id;
    perform subtract_spend('api_key', r.api_key_id::text, 'all', r.day, v_released);
    perform subtract_spend('proxy_account', r.account_id::text, r.network_class, r.day, v_released);
    perform subtract_spend('proxy_system', 'system', r.network_class, r.day, v_released);
    insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
      values (r.organisation_id, r.account_id, r.api_key_id, 'release', v_released, r.reference);
  end if;
  if p.webhook_id is not null then
    update webhooks w
      set status = 'success',
          tx_hash = nullif(p.tx_hash, ''),
          network = p.network,
          message = 'Payment of ' || trim_scale(p.amount_micro_usdc * 0.000001)::text || ' USDC (of at most '
            || trim_scale(p.max_amount_micro_usdc * 0.000001)::text || ') to the target confirmed on-chain; '
            || p.credits::text || ' credits charged, ' || v_released::text || ' released',
          error = null,
          updated_at = now()
      where w.id = p.webhook_id and w.status = 'async_processing';
  end if;
  return true;
end
$fn$;
