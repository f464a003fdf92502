import { sql, type Kysely } from 'kysely';

/**
 * Every change to an API key (revocation, a new daily cap, deletion) or to an account is announced
 * on the channel `api_keys_changed`, after commit, so that a process holding keys in memory drops
 * them at once. The payload is the key's prefix, or '*' when every cached key may be affected.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function notify_api_key_change() returns trigger language plpgsql as $$
    begin
      perform pg_notify('api_keys_changed', case when tg_table_name = 'api_keys' then old.prefix else '*' end);
      return null;
    end
    $$;
    create trigger api_keys_changed after update or delete on api_keys
      for each row execute function notify_api_key_change();
    create trigger accounts_changed after update or delete on accounts
      for each row execute function notify_api_key_change();
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop trigger accounts_changed on accounts;
    drop trigger api_keys_changed on api_keys;
    drop function notify_api_key_change();
  `.execute(db);
}
