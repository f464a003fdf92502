-- Admits a verified client payment of POST /relay in one round trip (payments/operations/relay/admit.ts):
-- under an idempotency claim, the claim must still be the record's (held FOR KEY SHARE, as
-- holdIdempotencyClaim does); the relay transaction is recorded (the unique nonce index refuses a
-- repeated payment); the amount is counted against the paying wallet's and the whole service's
-- daily relay limits of the network class; the row says when it is first looked at (look_at) and
-- the relay_follow job (p_watch_task: one key and queue for the service) is queued for that time
-- unless one already waits for it or earlier (db/migrations/..._relay_follow). All or
-- nothing: a refusal leaves nothing written. Lock order: the idempotency record, the new row, the
-- wallet's counter, then the system's (as the code before this function took them).
--
-- The row carries the scheme the client paid with and, for upto, the maximum it signed from this
-- first write on (p_scheme, p_maximum_atomic): there is no moment a permit's row says exact.
-- p_settle_method, when given, admits the row already claimed for settling by that method
-- (state settling): the paid call settles it next, and the claim is not a write of its own.
-- (The versions with fewer parameters, replaced here, are dropped first: a call must name one function.)
--
-- An upto permit (p_scheme 'upto') is refused first when its payer once failed to pay one
-- (upto_defaulted_payers), then counted as open against the wallet's and the service's bounds on
-- upto exposure (add_upto_exposure; p_upto_wallet_limit, p_upto_total_limit), and the row carries
-- the class it was counted on (upto_exposure_class; the trigger release_upto_exposure takes it back
-- when the row leaves received and settling). Lock order: the idempotency record, the new row, the
-- exposure counters (wallet, service), the daily counters (wallet, service).
--
-- outcome: 'admitted' (relay_transaction_id set), 'claim_lost', 'nonce_already_used',
-- 'limit_exceeded' (limit_scope 'wallet' or 'system', spent: the counter as it stands),
-- 'upto_payer_defaulted', or 'upto_exposure_exceeded' (limit_scope 'wallet' or 'total', spent:
-- the open maxima counted on that bound).
drop function if exists admit_relay_payment(
  text, text, text, text, text, bigint, text, jsonb, jsonb, bigint, text, text, text, bigint, date, text,
  text, text, uuid, text, bigint, bigint, text, timestamptz, integer
);
drop function if exists admit_relay_payment(
  text, text, text, text, text, bigint, text, jsonb, jsonb, bigint, text, text, text, bigint, date, text,
  text, text, uuid, text, bigint, bigint, text, timestamptz, integer, text, numeric
);
drop function if exists admit_relay_payment(
  text, text, text, text, text, bigint, text, jsonb, jsonb, bigint, text, text, text, bigint, date, text,
  text, text, uuid, text, bigint, bigint, text, timestamptz, integer, text, numeric, text
);
create or replace function admit_relay_payment(
  p_network text,
  p_chain_type text,
  p_asset text,
  p_payer text,
  p_pay_to text,
  p_amount bigint,
  p_nonce_key text,
  p_payment_payload jsonb,
  p_payment_requirements jsonb,
  p_valid_before bigint,
  p_target_url text,
  p_target_method text,
  p_target_network text,
  p_target_amount bigint,
  p_spend_day date,
  p_mode text,
  p_idempotency_scope text,
  p_idempotency_key text,
  p_idempotency_claim uuid,
  p_network_class text,
  p_wallet_limit bigint,
  p_system_limit bigint,
  p_watch_task text,
  p_watch_at timestamptz,
  p_watch_max_attempts integer,
  p_scheme text,
  p_maximum_atomic numeric,
  p_settle_method text,
  p_upto_wallet_limit bigint,
  p_upto_total_limit bigint
) returns table (outcome text, relay_transaction_id bigint, limit_scope text, spent bigint)
language plpgsql as $fn$
#variable_conflict use_column
declare
  v_id bigint;
  -- The counters, in lock order: the paying wallet's, then the service's ('system' is
  -- SYSTEM_SCOPE_ID of payments/accounts/limits.ts).
  v_scopes text[] := array['relay_wallet', 'relay_system'];
  v_scope_ids text[] := array[p_payer, 'system'];
  v_classes text[] := array[p_network_class, p_network_class];
  v_limits bigint[] := array[p_wallet_limit, p_system_limit];
  v_refused integer;
  v_exposure text;
  v_upto_class text := case when p_scheme = 'upto' then p_network_class end;
  v_look_at timestamptz := greatest(p_watch_at, now());
begin
  if p_idempotency_claim is not null then
    perform 1 from idempotency_records r
      where r.scope = p_idempotency_scope and r.key = p_idempotency_key and r.claim = p_idempotency_claim
        and r.state = 'running'
      for key share;
    if not found then
      return query select 'claim_lost'::text, null::bigint, null::text, null::bigint;
      return;
    end if;
  end if;
  -- A payer that failed to pay an upto charge is never admitted by upto again (it may pay exact).
  if v_upto_class is not null and exists (select 1 from upto_defaulted_payers d where d.payer = p_payer) then
    return query select 'upto_payer_defaulted'::text, null::bigint, null::text, null::bigint;
    return;
  end if;
  insert into relay_transactions (
      network, chain_type, asset, payer, pay_to, amount_micro, nonce_key, payment_payload,
      payment_requirements, valid_before, target_url, target_method, target_network,
      target_amount_micro, spend_day, mode, idempotency_claim, scheme, maximum_atomic, look_at,
      state, settle_method, upto_exposure_class)
    values (
      p_network, p_chain_type, p_asset, p_payer, p_pay_to, p_amount, p_nonce_key, p_payment_payload,
      p_payment_requirements, p_valid_before, p_target_url, p_target_method, p_target_network,
      p_target_amount, p_spend_day, p_mode, p_idempotency_claim, p_scheme, p_maximum_atomic, v_look_at,
      case when p_settle_method is null then 'received' else 'settling' end, p_settle_method, v_upto_class)
    on conflict (network, asset, nonce_key) do nothing
    returning id into v_id;
  if v_id is null then
    return query select 'nonce_already_used'::text, null::bigint, null::text, null::bigint;
    return;
  end if;
  -- The permit's maximum stays open (money we may never get) until the row is settled or ended.
  if v_upto_class is not null then
    v_exposure := add_upto_exposure(p_payer, v_upto_class, p_upto_wallet_limit, p_upto_total_limit, p_amount);
    if v_exposure is not null then
      delete from relay_transactions r where r.id = v_id;
      return query select 'upto_exposure_exceeded'::text, null::bigint, v_exposure,
        coalesce((select e.open_micro from upto_exposure e
          where e.scope = v_exposure and e.network_class = v_upto_class
            and e.scope_id = case when v_exposure = 'wallet' then p_payer else 'system' end), 0)::bigint;
      return;
    end if;
  end if;
  -- Both counters together (add_spend). A refusal has taken back what moved; the row goes too, in
  -- this transaction, so the refused payment leaves nothing (its nonce stays unused).
  v_refused := add_spend(v_scopes, v_scope_ids, v_classes, v_limits, p_spend_day, p_amount);
  if v_refused is not null then
    delete from relay_transactions r where r.id = v_id;
    if v_upto_class is not null then
      -- What add_upto_exposure moved goes back too (a deleted row fires no release).
      update upto_exposure e set open_micro = e.open_micro - p_amount
        where e.scope in ('wallet', 'total') and e.network_class = v_upto_class
          and e.scope_id = case when e.scope = 'wallet' then p_payer else 'system' end;
      delete from upto_exposure e
        where e.scope = 'wallet' and e.scope_id = p_payer and e.network_class = v_upto_class and e.open_micro = 0;
    end if;
    return query select 'limit_exceeded'::text, null::bigint, (array['wallet', 'system'])[v_refused],
      daily_spent(v_scopes[v_refused], v_scope_ids[v_refused], v_classes[v_refused], p_spend_day);
    return;
  end if;
  -- The follow job finishes the transaction should its request never come back. A job waiting to
  -- run by then sees this row when it runs; one running may have read the due rows already, and
  -- add_job then queues another behind it (its key is cleared). 'replace' brings a later one forward.
  if not exists (
    select 1 from graphile_worker.jobs j
      where j.key = p_watch_task and j.locked_at is null and j.run_at <= v_look_at
  ) then
    perform graphile_worker.add_job(
      identifier => p_watch_task,
      payload => '{}'::json,
      queue_name => p_watch_task,
      run_at => v_look_at,
      max_attempts => p_watch_max_attempts,
      job_key => p_watch_task,
      job_key_mode => 'replace'
    );
  end if;
  return query select 'admitted'::text, v_id, null::text, null::bigint;
end
$fn$;
