import { sql, type Kysely } from 'kysely';

/**
 * Our channels as a payer of `batch-settlement` targets (x402's batch-settlement scheme: one deposit
 * into the x402BatchSettlement contract, then a signed voucher with a cumulative ceiling per call).
 *
 * - payer_channels: one open channel per network, token, receiver, receiver authorizer and withdraw
 *   delay (a partial unique index), with its immutable config (payer and payer authorizer are our
 *   wallet; the salt is ours) and what we know of it: `deposited_atomic` (what our deposits put in,
 *   as the chain showed), `charged_atomic` (the seller's committed cumulative charge, as its answers
 *   and corrective 402s told us), `signed_max_atomic` (the highest ceiling we ever signed: what the
 *   seller could claim at most), and the chain's `balance_atomic` and `total_claimed_atomic` as last
 *   read. Amounts in the token's atomic units.
 * - payer_vouchers: every voucher we signed, written before it is sent (with the deposit it carries,
 *   if any), with the base it was signed on and how it ended: charged (the seller committed
 *   `charged_atomic` of it), not_charged (the seller refused or failed the call), or unknown (no
 *   answer: the next exchange on the channel, or the chain, decides). `call_reference` links the
 *   call it paid for: a /proxy payment's reference, or `relay:<id>` for a relay transaction.
 * - proxy_payments.scheme takes 'batch-settlement', ruled as upto: a maximum and the credits held
 *   for it, the charge what the seller reported (at most the voucher's increment) plus the fee.
 * - relay_transactions.target_scheme takes 'batch-settlement': our payment to the target was a
 *   voucher (the row's target_payment_ref is `channel:<channel id>`), charged as upto.
 */
/** The values of proxy_payments.scheme, a domain (..._column_domains): its check replaced by one over `values`. */
function replaceSchemeCheck(values: readonly string[], domain = 'proxy_payments_scheme') {
  const list = sql.raw(values.map((value) => `'${value}'`).join(', '));
  const name = sql.raw(domain);
  return sql`
    do $replace$
    declare c record;
    begin
      for c in select conname from pg_constraint where contypid = '${name}'::regtype and contype = 'c' loop
        execute format('alter domain ${name} drop constraint %I', c.conname);
      end loop;
    end
    $replace$;
    alter domain ${name} add constraint ${sql.raw(`${domain}_check`)} check (value in (${list}));`;
}

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table payer_channels (
      channel_id text primary key,
      network text not null,
      token text not null,
      payer text not null,
      payer_authorizer text not null,
      receiver text not null,
      receiver_authorizer text not null,
      withdraw_delay integer not null check (withdraw_delay > 0),
      salt text not null,
      deposited_atomic numeric(78, 0) not null default 0 check (deposited_atomic >= 0),
      charged_atomic numeric(78, 0) not null default 0 check (charged_atomic >= 0),
      signed_max_atomic numeric(78, 0) not null default 0 check (signed_max_atomic >= charged_atomic),
      balance_atomic numeric(78, 0) not null default 0 check (balance_atomic >= 0),
      total_claimed_atomic numeric(78, 0) not null default 0 check (total_claimed_atomic >= 0),
      state text not null default 'open' check (state in ('open', 'closing', 'closed')),
      last_used_at timestamptz not null default now(),
      synced_at timestamptz,
      created_at timestamptz not null default now()
    );
    create unique index payer_channels_open on payer_channels (network, token, receiver, receiver_authorizer, withdraw_delay)
      where state = 'open';

    create table payer_vouchers (
      id bigserial primary key,
      channel_id text not null references payer_channels (channel_id),
      call_reference text,
      base_atomic numeric(78, 0) not null check (base_atomic >= 0),
      ceiling_atomic numeric(78, 0) not null check (ceiling_atomic >= base_atomic),
      deposit_atomic numeric(78, 0) check (deposit_atomic > 0),
      signature text not null,
      state text not null default 'sent' check (state in ('sent', 'charged', 'not_charged', 'unknown')),
      charged_atomic numeric(78, 0) check (charged_atomic >= 0 and charged_atomic <= ceiling_atomic - base_atomic),
      deposit_tx_hash text,
      details text,
      created_at timestamptz not null default now(),
      resolved_at timestamptz
    );
    create index payer_vouchers_channel on payer_vouchers (channel_id, id);
    create index payer_vouchers_open on payer_vouchers (channel_id) where state in ('sent', 'unknown');
    create index payer_vouchers_call on payer_vouchers (call_reference) where call_reference is not null;

    ${replaceSchemeCheck(['exact', 'upto', 'batch-settlement'])}
    ${replaceSchemeCheck(['exact', 'upto', 'batch-settlement'], 'relay_transactions_target_scheme')}
    alter table proxy_payments
      drop constraint proxy_payments_upto_maximum,
      add constraint proxy_payments_upto_maximum check (
        (scheme = 'exact' and max_amount_micro_usdc is null and reserved_credits is null)
        or (scheme in ('upto', 'batch-settlement') and max_amount_micro_usdc is not null and reserved_credits is not null
            and amount_micro_usdc <= max_amount_micro_usdc and credits <= reserved_credits));
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    delete from proxy_payments where scheme = 'batch-settlement';
    update relay_transactions set target_scheme = 'upto' where target_scheme = 'batch-settlement';
    ${replaceSchemeCheck(['exact', 'upto'])}
    ${replaceSchemeCheck(['exact', 'upto'], 'relay_transactions_target_scheme')}
    alter table proxy_payments
      drop constraint proxy_payments_upto_maximum,
      add constraint proxy_payments_upto_maximum check (
        (scheme = 'exact' and max_amount_micro_usdc is null and reserved_credits is null)
        or (scheme = 'upto' and max_amount_micro_usdc is not null and reserved_credits is not null
            and amount_micro_usdc <= max_amount_micro_usdc and credits <= reserved_credits));
    drop table payer_vouchers;
    drop table payer_channels;
  `.execute(db);
}
