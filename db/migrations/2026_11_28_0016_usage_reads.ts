import { sql, type Kysely } from 'kysely';

/**
 * What an organisation reads of its own money (GET /v1/payments, GET /v1/usage): the target's
 * host of each proxy payment, derived from its URL by Postgres itself so that no writer has to
 * keep it, and the indexes that bound both reads. The host is the URL's authority without user
 * information, lower case, without the scheme's default port: what `new URL(url).host` gives for
 * the URLs a client sends. The ledger's index holds only the entries that are not one step of a
 * proxy payment (grants, and purchases to come): those appear in the history beside the payments.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table proxy_payments add column target_host text generated always as (
      case
        when lower(target_url) like 'https:%'
          then regexp_replace(lower(substring(target_url, '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)')), ':443$', '')
        else regexp_replace(lower(substring(target_url, '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)')), ':80$', '')
      end
    ) stored;
    create index proxy_payments_organisation_created on proxy_payments (organisation_id, created_at desc, id desc);
    create index proxy_payments_organisation_host on proxy_payments (organisation_id, target_host, created_at desc, id desc);
    create index proxy_payments_key_created on proxy_payments (api_key_id, created_at desc, id desc);
    create index credit_ledger_organisation_movements on credit_ledger (organisation_id, created_at desc, id desc)
      where kind not in ('reserve', 'charge', 'release');
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    drop index credit_ledger_organisation_movements;
    drop index proxy_payments_key_created;
    drop index proxy_payments_organisation_host;
    drop index proxy_payments_organisation_created;
    alter table proxy_payments drop column target_host;
  `.execute(db);
}
