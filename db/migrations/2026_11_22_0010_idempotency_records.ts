import { sql, type Kysely } from 'kysely';

/**
 * The outcome of a paid call kept for its retries (docs/decisions.md, Idempotency-Key): one row
 * per (scope, key), written `running` before the call starts and `finished` with the answer the
 * client was given (status, content type, the headers of ours and the target's passed on, the body
 * bytes). `payment` names the payment of the first call of an Idempotency-Key on /relay (a hash): a
 * repeat that carries another one must prove it would pay before it is given the answer. `fingerprint` is the request the key was first used with; a row whose `expires_at` has
 * passed counts as absent and is pruned by the idempotency_prune job.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table idempotency_records (
      scope text not null check (length(scope) between 1 and 300),
      key text not null check (length(key) between 1 and 300),
      fingerprint text not null,
      payment text,
      state text not null check (state in ('running', 'finished')),
      status integer check (status between 100 and 599),
      content_type text,
      headers jsonb,
      body bytea,
      created_at timestamptz not null default now(),
      finished_at timestamptz,
      expires_at timestamptz not null,
      primary key (scope, key),
      check ((state = 'running') = (status is null)),
      check ((state = 'running') = (body is null))
    );
    create index idempotency_records_expiry on idempotency_records (expires_at);
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table idempotency_records`.execute(db);
}
