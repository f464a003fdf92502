import { sql, type Kysely } from 'kysely';

/**
 * A client's payment by `upto` (x402's Permit2 scheme where the payer signs a maximum and the
 * receiver settles what was used): the row says which scheme the client paid with, the maximum it
 * signed and, once settled, the amount we took, both in the asset's atomic units (numeric: 18
 * decimals do not fit a bigint for long). amount_micro stays what the client authorized (the
 * maximum in micro-USDC), what the daily limits count. Every older row is `exact`, without either.
 * The check holds the rule of the scheme: never settled above the maximum (each comparison with
 * its null case written out: a check whose expression is null passes).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions
      add column scheme text not null default 'exact',
      add column maximum_atomic numeric(78, 0),
      add column settled_atomic numeric(78, 0),
      add constraint relay_transactions_scheme_amounts check (
        (scheme = 'exact' and maximum_atomic is null and settled_atomic is null)
        or (
          scheme = 'upto' and maximum_atomic is not null and maximum_atomic > 0
          and (settled_atomic is null or settled_atomic between 0 and maximum_atomic)
        )
      );
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    alter table relay_transactions
      drop constraint relay_transactions_scheme_amounts,
      drop column settled_atomic,
      drop column maximum_atomic,
      drop column scheme;
  `.execute(db);
}
