import { sql, type Kysely } from 'kysely';

/**
 * What a /relay client paying by upto can cost the service (payments/operations/relay/uptoClient.ts): its
 * permit is settled only after the target was paid, so until then the maximum it signed is money
 * we may never get (the payer can revoke its Permit2 allowance or move its funds in between).
 *
 * - upto_exposure: the maxima (relay_transactions.amount_micro, micro-USDC) of upto permits
 *   admitted and not yet settled or ended, per paying wallet and for the whole service ('total',
 *   scope_id 'system'), per network class. admit_relay_payment moves both counters only while each
 *   stays within its bound, in one statement each (db/functions/add_upto_exposure.sql), as the
 *   daily counters are moved, so concurrent admissions never overshoot.
 * - relay_transactions.upto_exposure_class: the network class an upto row was counted on; set by
 *   the admission, cleared (and the counters taken back, once) by the trigger below when the row
 *   leaves received and settling (settled, or settle_failed: nothing taken, or the charge lost).
 *   A row admitted without it (by the release before) is never taken back from the counters.
 * - upto_defaulted_payers: payers whose upto charge was lost after the target was paid; they are
 *   never admitted by upto again (offered exact only). Read by their key at each upto admission.
 *
 * Upto rows still open when this runs are not counted (nor taken back): they end within minutes,
 * by their permit's deadline, and the counters start at zero.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create domain upto_exposure_scope as text check (value in ('wallet', 'total'));
    create domain upto_exposure_network_class as text check (value in ('mainnet', 'testnet'));
    create domain upto_exposure_open_micro as bigint check (value >= 0);
    create table upto_exposure (
      scope upto_exposure_scope not null,
      scope_id text not null,
      network_class upto_exposure_network_class not null,
      open_micro upto_exposure_open_micro not null,
      primary key (scope, scope_id, network_class)
    );
    create domain relay_transactions_upto_exposure_class as text check (value in ('mainnet', 'testnet'));
    alter table relay_transactions add column upto_exposure_class relay_transactions_upto_exposure_class;

    create table upto_defaulted_payers (
      payer text primary key,
      network text not null,
      relay_transaction_id bigint not null,
      reason text not null,
      lost_micro bigint not null,
      defaulted_at timestamptz not null default now()
    );

    create function release_upto_exposure() returns trigger language plpgsql as $fn$
    begin
      update upto_exposure e set open_micro = greatest(e.open_micro - old.amount_micro, 0)
        where e.scope = 'wallet' and e.scope_id = old.payer and e.network_class = old.upto_exposure_class;
      delete from upto_exposure e
        where e.scope = 'wallet' and e.scope_id = old.payer and e.network_class = old.upto_exposure_class
          and e.open_micro = 0;
      update upto_exposure e set open_micro = greatest(e.open_micro - old.amount_micro, 0)
        where e.scope = 'total' and e.scope_id = 'system' and e.network_class = old.upto_exposure_class;
      new.upto_exposure_class := null;
      return new;
    end
    $fn$;
    create trigger relay_transactions_upto_exposure
      before update of state on relay_transactions
      for each row when (old.upto_exposure_class is not null and new.state not in ('received', 'settling'))
      execute function release_upto_exposure();
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop trigger relay_transactions_upto_exposure on relay_transactions;
    drop function release_upto_exposure();
    drop table upto_defaulted_payers;
    alter table relay_transactions drop column upto_exposure_class;
    drop domain relay_transactions_upto_exposure_class;
    drop table upto_exposure;
    drop domain upto_exposure_scope, upto_exposure_network_class, upto_exposure_open_micro;
  `.execute(db);
}
