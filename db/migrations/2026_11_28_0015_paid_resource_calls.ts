import { sql, type Kysely } from 'kysely';

/**
 * One row per paid call the service made to a target (/proxy and the second leg of /relay), for
 * GET /discovery/resources: the resource as origin and path only (never its query string, body
 * or the caller), the offer we paid (with the same resource), whether the call succeeded and how
 * long the paid exchange took.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table paid_resource_calls (
      id bigserial primary key,
      resource text not null check (length(resource) between 1 and 2048),
      method text not null,
      network text not null,
      offer jsonb not null,
      succeeded boolean not null,
      latency_ms integer not null check (latency_ms >= 0),
      created_at timestamptz not null default now()
    );
    create index paid_resource_calls_recent on paid_resource_calls (created_at);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table paid_resource_calls;`.execute(db);
}
