import { sql, type Kysely } from 'kysely';
import { USAGE_UPDATE_TRIGGER } from './2026_12_01_0028_usage_daily_rows';

/**
 * The rules of single columns on the tables every paid call writes become the columns' types:
 * each CHECK of one column (a state among its values, an amount above zero, a status code in
 * range) is now a domain named `<table>_<column>` with the same expression, and the column is of
 * that type. Same values allowed and refused (a refused value names the domain and its check).
 *
 * Why: Postgres reads a table's CHECK constraints back from their stored text on every statement
 * that writes the table, all of them, whatever the statement sets; a paid /relay call writes its
 * row five times and read 13 of them each time. A domain's check is read once per connection and
 * kept, and runs only when a value is written to that column. Checks over several columns stay on
 * their tables.
 *
 * The triggers that name a column of these tables are dropped and created again around the change
 * (Postgres refuses to change the type of a column a trigger names), as they were.
 */
const TABLES = [
  'organisations',
  'daily_spend',
  'credit_reservations',
  'credit_ledger',
  'proxy_payments',
  'finality_watches',
  'relay_transactions',
  'idempotency_records',
];

/** The tables as an SQL array literal (a DO block takes no parameters). */
const TABLE_ARRAY = sql.raw(`array[${TABLES.map((table) => `'${table}'`).join(', ')}]`);

const DROP_TRIGGERS = sql`
  drop trigger proxy_payments_finality on proxy_payments;
  drop trigger proxy_payments_usage_update on proxy_payments;
  drop trigger relay_transactions_finality on relay_transactions;
`;

const CREATE_TRIGGERS = sql`
  create trigger proxy_payments_finality
    after update of state on proxy_payments
    for each row when (new.state = 'charged' and new.tx_hash is not null)
    execute function watch_proxy_finality();
  ${sql.raw(USAGE_UPDATE_TRIGGER)}
  create trigger relay_transactions_finality
    after insert or update of state, client_tx_hash, target_tx_hash on relay_transactions
    for each row execute function watch_relay_finality();
`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await DROP_TRIGGERS.execute(db);
  await sql`
    do $convert$
    declare
      c record;
      v_column text;
      v_type text;
      v_domain text;
    begin
      for c in
        select k.conrelid::regclass::text as table_name, k.conname, k.conkey[1] as attnum, pg_get_constraintdef(k.oid) as definition
        from pg_constraint k
        where k.contype = 'c' and cardinality(k.conkey) = 1
          and k.conrelid::regclass::text = any (${TABLE_ARRAY}::text[])
        order by 1, 2
      loop
        select a.attname, format_type(a.atttypid, a.atttypmod) into v_column, v_type
          from pg_attribute a where a.attrelid = c.table_name::regclass and a.attnum = c.attnum;
        v_domain := c.table_name || '_' || v_column;
        execute format('create domain %I as %s %s', v_domain, v_type,
          regexp_replace(c.definition, '\\m' || v_column || '\\M', 'VALUE', 'g'));
        execute format('alter table %I drop constraint %I', c.table_name, c.conname);
        execute format('alter table %I alter column %I type %I', c.table_name, v_column, v_domain);
      end loop;
    end
    $convert$;
  `.execute(db);
  await CREATE_TRIGGERS.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await DROP_TRIGGERS.execute(db);
  await sql`
    do $convert$
    declare
      c record;
    begin
      for c in
        select a.attrelid::regclass::text as table_name, a.attname as column_name, t.typname as domain_name,
               format_type(t.typbasetype, t.typtypmod) as base_type, pg_get_constraintdef(k.oid) as definition
        from pg_attribute a
        join pg_type t on t.oid = a.atttypid and t.typtype = 'd'
        join pg_constraint k on k.contypid = t.oid and k.contype = 'c'
        where a.attrelid::regclass::text = any (${TABLE_ARRAY}::text[]) and a.attnum > 0 and not a.attisdropped
          and t.typname = a.attrelid::regclass::text || '_' || a.attname
      loop
        execute format('alter table %I alter column %I type %s', c.table_name, c.column_name, c.base_type);
        execute format('alter table %I add constraint %I %s', c.table_name, c.table_name || '_' || c.column_name || '_check',
          regexp_replace(c.definition, '\\mVALUE\\M', quote_ident(c.column_name), 'g'));
        execute format('drop domain %I', c.domain_name);
      end loop;
    end
    $convert$;
  `.execute(db);
  await CREATE_TRIGGERS.execute(db);
}
