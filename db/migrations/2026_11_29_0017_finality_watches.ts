import { sql, type Kysely } from 'kysely';

/**
 * Settled and final are two states (docs/decisions.md, "What is final when"). Every transaction a
 * payment rests on gets a finality watch once the flow records it settled: a client's settlement
 * (relay_transactions.client_tx_hash of a settled row), our payment to a target
 * (relay_transactions.target_tx_hash of a delivered row, a charged proxy payment's tx_hash) and a
 * confirmed refund: each only once the chain showed it.
 * Triggers open the watch and enqueue its `finality_watch` job in the writer's own transaction, so
 * no path that settles a payment can forget it. A watch holds what the chain family needs to read
 * the transaction and to send it again (`transfer`): the client's authorization or transaction, our
 * signed payment to the target (now stored when signed), a refund's signed bytes.
 *
 * The credits ledger says whether a proxy payment's charge is final (credit_ledger.finality).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions add column target_payment_payload jsonb;
    alter table proxy_payments add column payment_payload jsonb;
    alter table credit_ledger add column finality text check (finality in ('pending', 'final', 'lost'));

    create table finality_watches (
      id bigserial primary key,
      subject text not null unique,
      leg text not null check (leg in ('client_settlement', 'target_payment', 'refund')),
      network text not null,
      relay_transaction_id bigint references relay_transactions (id),
      proxy_payment_id bigint references proxy_payments (id),
      refund_id bigint references refunds (id),
      tx_hash text not null,
      payer text,
      amount_micro_usdc bigint not null,
      transfer jsonb not null,
      finality text not null default 'pending' check (finality in ('pending', 'final', 'lost')),
      block_number bigint,
      resends integer not null default 0,
      details text,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      final_at timestamptz
    );
    create index finality_watches_pending on finality_watches (created_at, id) where finality = 'pending';
    create index finality_watches_relay on finality_watches (relay_transaction_id) where relay_transaction_id is not null;
    create index finality_watches_proxy on finality_watches (proxy_payment_id) where proxy_payment_id is not null;

    create function open_finality_watch(
      p_subject text, p_leg text, p_network text, p_relay bigint, p_proxy bigint, p_refund bigint,
      p_tx_hash text, p_payer text, p_amount bigint, p_transfer jsonb
    ) returns void language plpgsql as $fn$
    declare
      v_id bigint;
    begin
      insert into finality_watches
        (subject, leg, network, relay_transaction_id, proxy_payment_id, refund_id, tx_hash, payer, amount_micro_usdc, transfer)
        values (p_subject, p_leg, p_network, p_relay, p_proxy, p_refund, p_tx_hash, p_payer, p_amount, p_transfer)
        on conflict (subject) do nothing
        returning id into v_id;
      if v_id is not null then
        perform graphile_worker.add_job(
          identifier => 'finality_watch',
          payload => json_build_object('watchId', v_id::text),
          run_at => now() + interval '1 second',
          max_attempts => 25,
          job_key => 'finality_watch:' || v_id::text
        );
      end if;
    end
    $fn$;

    create function watch_relay_finality() returns trigger language plpgsql as $fn$
    begin
      if new.client_tx_hash is not null
        and new.state in ('settled', 'delivered', 'refund_pending', 'refunded', 'refund_failed') then
        perform open_finality_watch('relay:' || new.id::text || ':client', 'client_settlement', new.network, new.id, null, null,
          new.client_tx_hash, new.payer, new.amount_micro,
          jsonb_build_object('payment', new.payment_payload, 'raw', new.client_raw_tx));
      end if;
      -- Only once delivered: the chain showed our payment to the target. A hash the target reported
      -- while the row is still settled is a hint the relay's watch job checks, never a payment to re-send.
      if new.state = 'delivered' and new.target_tx_hash is not null and new.target_network is not null then
        perform open_finality_watch('relay:' || new.id::text || ':target', 'target_payment', new.target_network, new.id, null, null,
          new.target_tx_hash, new.target_payer, coalesce(new.target_amount_micro, 0),
          jsonb_build_object('payment', new.target_payment_payload));
      end if;
      return null;
    end
    $fn$;
    create trigger relay_transactions_finality
      after insert or update of state, client_tx_hash, target_tx_hash on relay_transactions
      for each row execute function watch_relay_finality();

    create function watch_proxy_finality() returns trigger language plpgsql as $fn$
    begin
      if new.state = 'charged' and new.tx_hash is not null then
        perform open_finality_watch('proxy:' || new.id::text, 'target_payment', new.network, null, new.id, null,
          new.tx_hash, new.payer, new.amount_micro_usdc, jsonb_build_object('payment', new.payment_payload));
      end if;
      return null;
    end
    $fn$;
    create trigger proxy_payments_finality
      after update of state on proxy_payments
      for each row execute function watch_proxy_finality();

    create function watch_refund_finality() returns trigger language plpgsql as $fn$
    begin
      if new.status = 'confirmed' and new.tx_hash is not null then
        perform open_finality_watch('refund:' || new.id::text, 'refund', new.network, new.relay_transaction_id, null, new.id,
          new.tx_hash, null, new.amount_micro,
          jsonb_build_object('raw', new.raw_tx, 'recipient', new.recipient, 'amount', new.amount_micro::text,
            'asset', new.asset, 'blockhash', new.blockhash));
      end if;
      return null;
    end
    $fn$;
    create trigger refunds_finality
      after insert or update of status on refunds
      for each row execute function watch_refund_finality();
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop trigger refunds_finality on refunds;
    drop trigger proxy_payments_finality on proxy_payments;
    drop trigger relay_transactions_finality on relay_transactions;
    drop function watch_refund_finality();
    drop function watch_proxy_finality();
    drop function watch_relay_finality();
    drop function open_finality_watch(text, text, text, bigint, bigint, bigint, text, text, bigint, jsonb);
    drop table finality_watches;
    alter table credit_ledger drop column finality;
    alter table proxy_payments drop column payment_payload;
    alter table relay_transactions drop column target_payment_payload;
  `.execute(db);
}
