// The daily spend counters as production moves them: a /relay payment is counted against its
// wallet's and the service's counters when it is admitted (admit_relay_payment, through
// admitClientPayment) and taken back when its settlement fails (markSettleFailed); the day
// rollover job opens each day's system counters and prunes old days (startDay).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { verifiedPayment } from '../support/verified-payment';
import { markSettleFailed } from '../../payments/incoming/store';
import { spentOn, startDay, type SpendKey } from '../../payments/accounts/limits';
import { admitClientPayment } from '../../payments/operations/relay/admit';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await database.drop();
});

/** Admits a payment of `amount` from the fixture's payer on base-sepolia (testnet), counted on `day`. */
function admit(amount: bigint, day: string, perWalletMicro: bigint) {
  return admitClientPayment(
    database.handle.db,
    verifiedPayment(undefined, amount),
    { spendDay: day, mode: 'relay' },
    { perWalletMicro, systemMicro: 1_000_000_000n, finishBy: new Date() },
  );
}

const walletOn = (day: string): SpendKey => ({
  scope: 'relay_wallet',
  scopeId: verifiedPayment().payer,
  networkClass: 'testnet',
  day,
});

describe('daily spend counters', () => {
  it('admits concurrent additions only up to the limit, never past it', async () => {
    const { db } = database.handle;
    const day = '2026-12-01';
    // 40 concurrent payments of 7 against a limit of 100: exactly 14 fit (98).
    const results = await Promise.all(Array.from({ length: 40 }, () => admit(7n, day, 100n)));
    expect(results.filter((result) => result.ok)).toHaveLength(14);
    for (const result of results)
      if (!result.ok) expect(result).toMatchObject({ reason: 'limit_exceeded', refusal: { scope: 'wallet' } });
    expect(await spentOn(db, walletOn(day))).toBe(98n);
    const refused = await admit(3n, day, 100n);
    expect(refused).toEqual({
      ok: false,
      reason: 'limit_exceeded',
      refusal: { scope: 'wallet', spentMicro: 98n, limitMicro: 100n, requestedMicro: 3n },
    });
    expect((await admit(2n, day, 100n)).ok).toBe(true);
    expect(await spentOn(db, walletOn(day))).toBe(100n);
  });

  it('refuses a first addition larger than the limit', async () => {
    const day = '2026-12-02';
    const result = await admit(101n, day, 100n);
    expect(result).toMatchObject({ ok: false, reason: 'limit_exceeded', refusal: { spentMicro: 0n } });
    expect(await spentOn(database.handle.db, walletOn(day))).toBe(0n);
  });

  it('keeps days apart and takes back released amounts without going below zero', async () => {
    const { db } = database.handle;
    const [today, tomorrow] = ['2026-12-03', '2026-12-04'];
    const first = await admit(50n, today, 60n);
    const second = await admit(5n, today, 60n);
    expect((await admit(60n, tomorrow, 60n)).ok).toBe(true);
    if (!first.ok || !second.ok) throw new Error('not admitted');
    expect(await spentOn(db, walletOn(today))).toBe(55n);
    expect(await markSettleFailed(db, first.value.id, 'test', 'released')).toBeDefined();
    expect(await spentOn(db, walletOn(today))).toBe(5n);
    // A counter lowered meanwhile (an operator's correction) is taken back to zero, never below.
    await db
      .updateTable('daily_spend')
      .set({ spent_micro_usdc: 2n })
      .where('scope', '=', 'relay_wallet')
      .where('day', '=', today)
      .execute();
    expect(await markSettleFailed(db, second.value.id, 'test', 'released')).toBeDefined();
    expect(await spentOn(db, walletOn(today))).toBe(0n);
    expect(await spentOn(db, walletOn(tomorrow))).toBe(60n);
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
