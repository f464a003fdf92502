// relay_transactions records a client's upto payment: the scheme it paid with, the maximum it
// signed and the amount we settled, in the asset's atomic units (18 decimals kept exactly). The
// database refuses a settled amount above the maximum, an upto row without a maximum, and an
// exact row with either.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Updateable } from 'kysely';
import type { Db } from '../../db/index';
import type { RelayTransactionsTable } from '../../db/schema';
import { recordClientPayment } from '../../payments/incoming/store';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';
import { verifiedPayment } from '../support/verified-payment';

let database: TestDatabase;
let db: Db;
beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await ifStarted(database)?.drop();
});

/** 0.05 MegaUSD (18 decimals): past 2^63 for a maximum of 10 units, far past 2^53. */
const MAXIMUM = 50_000_000_000_000_000n;

async function recorded(): Promise<bigint> {
  const row = await recordClientPayment(db, verifiedPayment());
  if (!row.ok) throw new Error(row.reason);
  return row.value.id;
}

const update = (id: bigint, values: Updateable<RelayTransactionsTable>) =>
  db.updateTable('relay_transactions').set(values).where('id', '=', id).execute();

describe('the upto columns of relay_transactions', () => {
  it('leave an exact payment as it was: scheme exact, no maximum, nothing settled apart', async () => {
    const id = await recorded();
    expect(
      await db
        .selectFrom('relay_transactions')
        .select(['scheme', 'maximum_atomic', 'settled_atomic'])
        .where('id', '=', id)
        .executeTakeFirstOrThrow(),
    ).toEqual({ scheme: 'exact', maximum_atomic: null, settled_atomic: null });
  });

  it('hold an upto payment’s maximum and what was settled of it, exactly', async () => {
    const id = await recorded();
    await update(id, { scheme: 'upto', maximum_atomic: MAXIMUM });
    await update(id, { settled_atomic: (MAXIMUM * 6n) / 10n });
    expect(
      await db
        .selectFrom('relay_transactions')
        .select(['scheme', 'maximum_atomic', 'settled_atomic'])
        .where('id', '=', id)
        .executeTakeFirstOrThrow(),
    ).toEqual({
      scheme: 'upto',
      maximum_atomic: MAXIMUM.toString(),
      settled_atomic: ((MAXIMUM * 6n) / 10n).toString(),
    });
    await update(id, { settled_atomic: MAXIMUM });
    await update(id, { settled_atomic: 0n });
  });

  it('refuse a settlement above the maximum, an upto row without a maximum, and an exact row with amounts', async () => {
    const upto = await recorded();
    await update(upto, { scheme: 'upto', maximum_atomic: MAXIMUM });
    await expect(update(upto, { settled_atomic: MAXIMUM + 1n })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    await expect(update(upto, { settled_atomic: -1n })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    await expect(update(upto, { maximum_atomic: null })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    await expect(update(upto, { maximum_atomic: 0n })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    const exact = await recorded();
    await expect(update(exact, { maximum_atomic: MAXIMUM })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    await expect(update(exact, { settled_atomic: 1n })).rejects.toThrow(/relay_transactions_scheme_amounts/);
    await expect(update(exact, { scheme: 'exactly' as 'exact' })).rejects.toThrow(/relay_transactions_scheme_amounts/);
  });
});
