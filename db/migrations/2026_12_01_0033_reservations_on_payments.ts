import { sql, type Kysely } from 'kysely';

/**
 * A /proxy payment's credit reservation is its own row: proxy_payments gains the two facts of the
 * reservation it did not hold (the network class and the UTC day of the daily counters the credits
 * were counted on), and credit_reservations goes. The payment's state was already the
 * reservation's (reserved or signed: held; charged; released), so the two rows moved together,
 * in the same transactions, always: every paid call inserted and updated a second row with its own
 * indexes and the foreign keys of both (four lookups with row locks), and a reservation settled
 * apart from its payment was a failure to guard against rather than a state that could not be.
 *
 * The new columns are filled for every row from its reservation. Instances still running the
 * previous release write payment rows without them (their hold names its columns): the columns'
 * defaults take them from the settings reserve_credits sets in the same transaction, so those
 * rows can be released like the others.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create domain proxy_payments_network_class as text check (value in ('mainnet', 'testnet'));
    alter table proxy_payments
      add column network_class proxy_payments_network_class
        default nullif(current_setting('prs.reserved_network_class', true), ''),
      add column spend_day date
        default nullif(current_setting('prs.reserved_day', true), '')::date;
    update proxy_payments p set network_class = c.network_class, spend_day = c.day
      from credit_reservations c where c.reference = p.reference;
    alter table proxy_payments drop constraint proxy_payments_reference_fkey;
    drop function if exists settle_reservation(text, text);
    drop table credit_reservations;
    drop domain credit_reservations_network_class, credit_reservations_credits, credit_reservations_state;
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  // The table as it was, each payment's reservation written back from its row (a payment open is
  // a reservation held; for upto, the credits held are the reservation).
  await sql`
    create domain credit_reservations_network_class as text check (value in ('mainnet', 'testnet'));
    create domain credit_reservations_credits as bigint check (value > 0);
    create domain credit_reservations_state as text check (value in ('reserved', 'charged', 'released'));
    create table credit_reservations (
      id bigserial primary key,
      reference text not null unique,
      organisation_id bigint not null references organisations (id),
      account_id bigint not null references accounts (id),
      api_key_id bigint not null references api_keys (id),
      network_class credit_reservations_network_class not null,
      day date not null,
      credits credit_reservations_credits not null,
      state credit_reservations_state not null default 'reserved',
      created_at timestamptz not null default now(),
      settled_at timestamptz
    );
    insert into credit_reservations
        (reference, organisation_id, account_id, api_key_id, network_class, day, credits, state, created_at, settled_at)
      select reference, organisation_id, account_id, api_key_id, network_class, spend_day,
          coalesce(reserved_credits, credits), case when state in ('reserved', 'signed') then 'reserved' else state end,
          created_at, settled_at
        from proxy_payments
        order by id;
    alter table proxy_payments add constraint proxy_payments_reference_fkey
      foreign key (reference) references credit_reservations (reference);
    alter table proxy_payments drop column network_class, drop column spend_day;
    drop domain proxy_payments_network_class;
  `.execute(db);
}
