import { sql, type Kysely } from 'kysely';

/**
 * Payments to targets that offer upto (x402 version 2): we sign a maximum, the target settles what
 * the call used, and the chain says how much that was.
 *
 * proxy_payments: `scheme` (exact or upto). For upto, `max_amount_micro_usdc` and
 * `reserved_credits` keep the maximum and the credits held for it; once charged,
 * `amount_micro_usdc` and `credits` are what the target settled and what was charged (the rest of
 * the reservation released), so that every reader of a charged payment (usage, the payments list,
 * the finality watch) sees what moved.
 *
 * relay_transactions: `target_scheme`; for upto, `target_used_micro` (what the target settled, read
 * from the chain), `charged_micro` (what the client pays in the end: the used amount plus the fee
 * on it) and `refund_micro` (the rest of the client's payment, refunded on its own network; a
 * refund of a row whose refund_micro is null returns the whole payment).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table proxy_payments
      add column scheme text not null default 'exact' check (scheme in ('exact', 'upto')),
      add column max_amount_micro_usdc bigint check (max_amount_micro_usdc > 0),
      add column reserved_credits bigint check (reserved_credits > 0),
      add constraint proxy_payments_upto_maximum check (
        (scheme = 'exact' and max_amount_micro_usdc is null and reserved_credits is null)
        or (scheme = 'upto' and max_amount_micro_usdc is not null and reserved_credits is not null
            and amount_micro_usdc <= max_amount_micro_usdc and credits <= reserved_credits));
    alter table relay_transactions
      add column target_scheme text check (target_scheme in ('exact', 'upto')),
      add column target_used_micro bigint check (target_used_micro >= 0),
      add column charged_micro bigint check (charged_micro >= 0),
      add column refund_micro bigint check (refund_micro > 0),
      add constraint relay_transactions_upto_amounts check (
        (charged_micro is null or charged_micro <= amount_micro)
        and (refund_micro is null or (charged_micro is not null and charged_micro + refund_micro = amount_micro))
        and (target_used_micro is null or target_amount_micro is null or target_used_micro <= target_amount_micro));
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions
      drop constraint relay_transactions_upto_amounts,
      drop column refund_micro,
      drop column charged_micro,
      drop column target_used_micro,
      drop column target_scheme;
    alter table proxy_payments
      drop constraint proxy_payments_upto_maximum,
      drop column reserved_credits,
      drop column max_amount_micro_usdc,
      drop column scheme;
  `.execute(db);
}
