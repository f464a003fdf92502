import { sql, type Kysely } from 'kysely';

/**
 * The amount a relay's finality watch puts at risk is what moved on its leg: for a client that paid
 * by upto, what we settled of its permit (`charged_micro`), not the maximum it signed
 * (`amount_micro`); for a target priced by upto, what it settled (`target_used_micro`), not its
 * maximum. An exact payment's amounts are unchanged. Only the function the trigger runs changes.
 */
function watchRelayFinality(client: string, target: string) {
  return sql`
    create or replace function watch_relay_finality() returns trigger language plpgsql as $fn$
    begin
      if new.client_tx_hash is not null
        and new.state in ('settled', 'delivered', 'refund_pending', 'refunded', 'refund_failed') then
        perform open_finality_watch('relay:' || new.id::text || ':client', 'client_settlement', new.network, new.id, null, null,
          new.client_tx_hash, new.payer, ${sql.raw(client)},
          jsonb_build_object('payment', new.payment_payload, 'raw', new.client_raw_tx));
      end if;
      -- Only once delivered: the chain showed our payment to the target. A hash the target reported
      -- while the row is still settled is a hint the relay's watch job checks, never a payment to re-send.
      if new.state = 'delivered' and new.target_tx_hash is not null and new.target_network is not null then
        perform open_finality_watch('relay:' || new.id::text || ':target', 'target_payment', new.target_network, new.id, null, null,
          new.target_tx_hash, new.target_payer, ${sql.raw(target)},
          jsonb_build_object('payment', new.target_payment_payload));
      end if;
      return null;
    end
    $fn$;
  `;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await watchRelayFinality(
    "case when new.scheme = 'upto' then coalesce(new.charged_micro, new.amount_micro) else new.amount_micro end",
    'coalesce(new.target_used_micro, new.target_amount_micro, 0)',
  ).execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await watchRelayFinality('new.amount_micro', 'coalesce(new.target_amount_micro, 0)').execute(db);
}
