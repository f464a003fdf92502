-- An upto payment (or one through a batch-settlement channel, ruled the same): signed -> charged (PROXY_MOVES in payments/operations/proxy/states.ts, as
-- charge_proxy_payment) for what the target settled: the payment's amount and credits become the
-- used amount and the credits charged for it (never more than the credits held), the rest of the
-- credits held given back (balance and daily counters, a release entry in the ledger:
-- give_back_credits), and the webhook record async_processing -> success, in the caller's
-- statement. The charge's ledger entry is pending finality while the payment has a transaction.
create or replace function charge_proxy_payment_used(
  p_reference text, p_tx_hash text, p_outcome text, p_used_micro bigint, p_charged_credits bigint
) returns boolean
language plpgsql as $fn$
#variable_conflict use_column
declare
  p proxy_payments;
  v_released bigint;
begin
  if p_used_micro is null or p_used_micro <= 0 or p_charged_credits is null or p_charged_credits <= 0 then
    raise exception 'an upto charge is of a positive amount and positive credits' using errcode = '22023';
  end if;
  update proxy_payments pp
    set state = 'charged', tx_hash = coalesce(p_tx_hash, pp.tx_hash), outcome = p_outcome, settled_at = now(),
        amount_micro_usdc = p_used_micro, credits = p_charged_credits
    where pp.reference = p_reference and pp.state = 'signed' and pp.scheme in ('upto', 'batch-settlement')
      and p_used_micro <= pp.max_amount_micro_usdc and p_charged_credits <= pp.reserved_credits
    returning pp.* into p;
  if not found then
    if exists (select 1 from proxy_payments pp where pp.reference = p_reference and pp.state = 'signed'
               and (pp.scheme not in ('upto', 'batch-settlement') or p_used_micro > pp.max_amount_micro_usdc or p_charged_credits > pp.reserved_credits)) then
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
  v_released := p.reserved_credits - p_charged_credits;
  insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference, finality)
    values (p.organisation_id, p.account_id, p.api_key_id, 'charge', p_charged_credits, p.reference,
            case when p.tx_hash is not null then 'pending' end);
  if v_released > 0 then
    perform give_back_credits(p, v_released);
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
