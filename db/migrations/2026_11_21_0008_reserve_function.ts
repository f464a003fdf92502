import { sql, type Kysely } from 'kysely';

/**
 * The credit rules of /proxy as database functions, so that each move of money is one round trip
 * (payments/accounts/credits.ts, payments/accounts/limits.ts and payments/operations/proxy/records.ts call them; the rules
 * live here only):
 *
 *   try_add_spend         a daily counter moves only while it stays within its limit
 *   subtract_spend        takes an amount back off a counter, never below zero
 *   reserve_credits       organisation balance, key daily cap, account and system daily limits of
 *                         the network class: all or nothing; the reservation row and the ledger entry
 *   settle_reservation    charged or released, once; a release gives back balance and counters
 *   charge_proxy_payment  signed -> charged, the reservation charged, the webhook record success
 *   release_proxy_payment reserved|signed -> released, the reservation released, the record payment_failed
 *
 * Lock order is the one the TypeScript code kept: the organisation row first, then the counters of
 * the key, the account and the system, in that order (a release takes its reservation row first).
 * Every function runs inside the caller's statement, so it is one transaction with it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function try_add_spend(
      p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint, p_limit bigint,
      out admitted boolean, out spent bigint
    ) language plpgsql as $fn$
    #variable_conflict use_column
    begin
      if p_amount is null or p_amount < 0 then
        raise exception 'spend amount must not be negative' using errcode = '22023';
      end if;
      if p_amount <= p_limit then
        insert into daily_spend as d (scope, scope_id, network_class, day, spent)
        values (p_scope, p_scope_id, p_network_class, p_day, p_amount)
        on conflict (scope, scope_id, network_class, day)
        do update set spent = d.spent + excluded.spent
        where d.spent + excluded.spent <= p_limit
        returning d.spent into spent;
        if found then
          admitted := true;
          return;
        end if;
      end if;
      -- Refused: the counter as it stands (zero when there is none yet).
      admitted := false;
      select d.spent into spent from daily_spend d
        where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
      spent := coalesce(spent, 0);
    end
    $fn$;

    create function subtract_spend(p_scope text, p_scope_id text, p_network_class text, p_day date, p_amount bigint)
    returns void language sql as $fn$
      update daily_spend d set spent = greatest(d.spent - p_amount, 0)
        where d.scope = p_scope and d.scope_id = p_scope_id and d.network_class = p_network_class and d.day = p_day;
    $fn$;

    create function reserve_credits(
      p_reference text,
      p_organisation_id bigint,
      p_account_id bigint,
      p_api_key_id bigint,
      p_key_daily_cap bigint,
      p_network_class text,
      p_day date,
      p_credits bigint,
      p_account_daily_limit bigint,
      p_system_daily_limit bigint
    ) returns table (reserved boolean, reason text, spent_credits bigint, limit_credits bigint, balance_credits bigint)
    language plpgsql as $fn$
    #variable_conflict use_column
    declare
      -- The counters, in lock order: the key's daily cap, the account's and the system's daily
      -- proxy limits of the network class. 'system' is SYSTEM_SCOPE_ID of payments/accounts/limits.ts.
      v_scopes text[] := array['api_key', 'proxy_account', 'proxy_system'];
      v_scope_ids text[] := array[p_api_key_id::text, p_account_id::text, 'system'];
      v_classes text[] := array['all', p_network_class, p_network_class];
      v_limits bigint[] := array[p_key_daily_cap, p_account_daily_limit, p_system_daily_limit];
      v_reasons text[] := array['key_daily_cap', 'account_daily_limit', 'system_daily_limit'];
      v_balance bigint;  -- the balance before this reservation
      v_admitted boolean;
      v_spent bigint;
      v_refused integer;
    begin
      if p_credits is null or p_credits <= 0 then
        raise exception 'a reservation must be positive' using errcode = '22023';
      end if;
      -- A subtransaction: a refusal by any counter rolls back the debit and the counters already
      -- moved. Local variables keep their values past the rollback; the refusal reports them.
      begin
        -- The organisation row is locked first by every reservation, so counters are taken in one order.
        update organisations o set credit_balance = o.credit_balance - p_credits
          where o.id = p_organisation_id and o.credit_balance >= p_credits
          returning o.credit_balance + p_credits into v_balance;
        if not found then
          select o.credit_balance into v_balance from organisations o where o.id = p_organisation_id;
          v_balance := coalesce(v_balance, 0);
          return query select false, 'insufficient_credits'::text, 0::bigint, v_balance, v_balance;
          return;
        end if;
        for i in 1 .. 3 loop
          select t.admitted, t.spent into v_admitted, v_spent
            from try_add_spend(v_scopes[i], v_scope_ids[i], v_classes[i], p_day, p_credits, v_limits[i]) t;
          if not v_admitted then
            v_refused := i;
            raise exception 'reservation refused: %', v_reasons[i] using errcode = 'PRS01';
          end if;
        end loop;
      exception when sqlstate 'PRS01' then
        return query select false, v_reasons[v_refused], v_spent, v_limits[v_refused], v_balance;
        return;
      end;
      insert into credit_reservations (reference, organisation_id, account_id, api_key_id, network_class, day, credits)
        values (p_reference, p_organisation_id, p_account_id, p_api_key_id, p_network_class, p_day, p_credits);
      insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
        values (p_organisation_id, p_account_id, p_api_key_id, 'reserve', p_credits, p_reference);
      return query select true, null::text, null::bigint, null::bigint, null::bigint;
    end
    $fn$;

    create function settle_reservation(p_reference text, p_to text) returns boolean
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

    create function charge_proxy_payment(p_reference text, p_tx_hash text, p_outcome text) returns boolean
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
      if not settle_reservation(p_reference, 'charged') then
        raise exception 'proxy payment %: its reservation was already settled', p.id;
      end if;
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

    create function release_proxy_payment(p_reference text, p_outcome text) returns boolean
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
      if not settle_reservation(p_reference, 'released') then
        raise exception 'proxy payment %: its reservation was already settled', p.id;
      end if;
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
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop function release_proxy_payment(text, text);
    drop function charge_proxy_payment(text, text, text);
    drop function settle_reservation(text, text);
    drop function reserve_credits(text, bigint, bigint, bigint, bigint, text, date, bigint, bigint, bigint);
    drop function subtract_spend(text, text, text, date, bigint);
    drop function try_add_spend(text, text, text, date, bigint, bigint);
  `.execute(db);
}
