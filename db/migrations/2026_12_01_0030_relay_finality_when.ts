import { sql, type Kysely } from 'kysely';

/**
 * A relay's finality watches (2026_11_29_0017_finality_watches, amounts of 2026_11_30_0027) are
 * opened by the update that makes each due, and the trigger is called only then: the client's
 * settlement when the row first holds a settled client transaction (or another one), our payment
 * to the target when the row first becomes delivered with its transaction. A paid /relay call
 * updates its row four times; the trigger ran on three of them and, on the delivery, tried to
 * open the client's watch a second time (an insert that conflicted). Same watches, same amounts.
 */
const SETTLED_STATES = "('settled', 'delivered', 'refund_pending', 'refunded', 'refund_failed')";
const CLIENT_DUE = (row: 'new' | 'old') => `(${row}.client_tx_hash is not null and ${row}.state in ${SETTLED_STATES})`;
const TARGET_DUE = (row: 'new' | 'old') =>
  `(${row}.state = 'delivered' and ${row}.target_tx_hash is not null and ${row}.target_network is not null)`;
/** On an update: the watch is due now and was not before, or its transaction changed. */
const CLIENT_NEWLY_DUE = `(${CLIENT_DUE('new')} and (not ${CLIENT_DUE('old')} or old.client_tx_hash is distinct from new.client_tx_hash))`;
const TARGET_NEWLY_DUE = `(${TARGET_DUE('new')} and (not ${TARGET_DUE('old')} or old.target_tx_hash is distinct from new.target_tx_hash))`;

/** The trigger function: each watch opened when its condition holds (the rest as 2026_11_30_0027 wrote it). */
const watchRelayFinality = (clientCondition: string, targetCondition: string) => `
    create or replace function watch_relay_finality() returns trigger language plpgsql as $fn$
    begin
      if ${clientCondition} then
        perform open_finality_watch('relay:' || new.id::text || ':client', 'client_settlement', new.network, new.id, null, null,
          new.client_tx_hash, new.payer, case when new.scheme = 'upto' then coalesce(new.charged_micro, new.amount_micro) else new.amount_micro end,
          jsonb_build_object('payment', new.payment_payload, 'raw', new.client_raw_tx));
      end if;
      -- Only once delivered: the chain showed our payment to the target. A hash the target reported
      -- while the row is still settled is a hint the relay's watch job checks, never a payment to re-send.
      if ${targetCondition} then
        perform open_finality_watch('relay:' || new.id::text || ':target', 'target_payment', new.target_network, new.id, null, null,
          new.target_tx_hash, new.target_payer, coalesce(new.target_used_micro, new.target_amount_micro, 0),
          jsonb_build_object('payment', new.target_payment_payload));
      end if;
      return null;
    end
    $fn$;`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    ${watchRelayFinality(
      `${CLIENT_DUE('new')} and (tg_op = 'INSERT' or ${CLIENT_NEWLY_DUE})`,
      `${TARGET_DUE('new')} and (tg_op = 'INSERT' or ${TARGET_NEWLY_DUE})`,
    )}
    drop trigger relay_transactions_finality on relay_transactions;
    create trigger relay_transactions_finality_insert after insert on relay_transactions
      for each row when (${CLIENT_DUE('new')} or ${TARGET_DUE('new')})
      execute function watch_relay_finality();
    create trigger relay_transactions_finality
      after update of state, client_tx_hash, target_tx_hash on relay_transactions
      for each row when (${CLIENT_NEWLY_DUE} or ${TARGET_NEWLY_DUE})
      execute function watch_relay_finality();
  `,
    )
    .execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `
    drop trigger relay_transactions_finality on relay_transactions;
    drop trigger relay_transactions_finality_insert on relay_transactions;
    ${watchRelayFinality(CLIENT_DUE('new'), TARGET_DUE('new'))}
    create trigger relay_transactions_finality
      after insert or update of state, client_tx_hash, target_tx_hash on relay_transactions
      for each row execute function watch_relay_finality();
  `,
    )
    .execute(db);
}
