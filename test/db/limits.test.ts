import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { spentOn, startDay, tryAddSpend, subtractSpend, type SpendKey } from '../../payments/limits';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database.drop();
});

describe('daily spend counters', () => {
  it('admits concurrent additions only up to the limit, never past it', async () => {
    const key: SpendKey = { scope: 'relay_wallet', scopeId: '0xabc', networkClass: 'testnet', day: '2026-11-21' };
    const { db } = database.handle;
    // 40 concurrent additions of 7 against a limit of 100: exactly 14 fit (98).
    const results = await Promise.all(
      Array.from({ length: 40 }, () => db.transaction().execute((tx) => tryAddSpend(tx, key, 7n, 100n))),
    );
    expect(results.filter((result) => result.admitted)).toHaveLength(14);
    expect(await spentOn(db, key)).toBe(98n);
    const refused = await db.transaction().execute((tx) => tryAddSpend(tx, key, 3n, 100n));
    expect(refused).toEqual({ admitted: false, spent: 98n });
    const exact = await db.transaction().execute((tx) => tryAddSpend(tx, key, 2n, 100n));
    expect(exact).toEqual({ admitted: true, spent: 100n });
  });

  it('refuses a first addition larger than the limit', async () => {
    const key: SpendKey = { scope: 'relay_wallet', scopeId: '0xdef', networkClass: 'mainnet', day: '2026-11-21' };
    const result = await database.handle.db.transaction().execute((tx) => tryAddSpend(tx, key, 101n, 100n));
    expect(result).toEqual({ admitted: false, spent: 0n });
    expect(await spentOn(database.handle.db, key)).toBe(0n);
  });

  it('keeps days apart and takes back released amounts without going below zero', async () => {
    const { db } = database.handle;
    const today: SpendKey = { scope: 'proxy_account', scopeId: '1', networkClass: 'mainnet', day: '2026-11-21' };
    const tomorrow = { ...today, day: '2026-11-22' };
    await db.transaction().execute((tx) => tryAddSpend(tx, today, 50n, 60n));
    expect((await db.transaction().execute((tx) => tryAddSpend(tx, tomorrow, 60n, 60n))).admitted).toBe(true);
    await db.transaction().execute((tx) => subtractSpend(tx, today, 80n));
    expect(await spentOn(db, today)).toBe(0n);
    expect(await spentOn(db, tomorrow)).toBe(60n);
  });

  it('opens a new day at zero and prunes rows past retention', async () => {
    const { db } = database.handle;
    await db
      .insertInto('daily_spend')
      .values({
        scope: 'relay_system',
        scope_id: 'system',
        network_class: 'mainnet',
        day: '2026-09-01',
        spent_micro_usdc: 5n,
      })
      .execute();
    await db
      .insertInto('daily_spend')
      .values({
        scope: 'relay_system',
        scope_id: 'system',
        network_class: 'mainnet',
        day: '2026-11-01',
        spent_micro_usdc: 5n,
      })
      .execute();
    const { prunedRows } = await startDay(db, '2026-11-23');
    expect(prunedRows).toBe(1);
    const rows = await db
      .selectFrom('daily_spend')
      .select(['scope', 'network_class', 'spent_micro_usdc', 'spent_credits'])
      .where('day', '=', '2026-11-23')
      .orderBy('scope')
      .orderBy('network_class')
      .execute();
    expect(rows).toEqual([
      { scope: 'proxy_system', network_class: 'mainnet', spent_micro_usdc: 0n, spent_credits: 0n },
      { scope: 'proxy_system', network_class: 'testnet', spent_micro_usdc: 0n, spent_credits: 0n },
      { scope: 'relay_system', network_class: 'mainnet', spent_micro_usdc: 0n, spent_credits: 0n },
      { scope: 'relay_system', network_class: 'testnet', spent_micro_usdc: 0n, spent_credits: 0n },
    ]);
    expect(
      await spentOn(db, { scope: 'relay_system', scopeId: 'system', networkClass: 'mainnet', day: '2026-11-01' }),
    ).toBe(5n);
    // Opening the same day again keeps what was spent.
    await db
      .updateTable('daily_spend')
      .set({ spent_micro_usdc: 9n })
      .where('day', '=', '2026-11-23')
      .where('scope', '=', 'relay_system')
      .execute();
    await startDay(db, '2026-11-23');
    expect(
      await spentOn(db, { scope: 'relay_system', scopeId: 'system', networkClass: 'testnet', day: '2026-11-23' }),
    ).toBe(9n);
  });
});
