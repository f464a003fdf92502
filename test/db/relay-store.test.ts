// relay_transactions and refunds in Postgres: the replay guard is the unique index (also under
// simultaneous inserts), state moves only from the expected states, and one refund at most is
// pending or confirmed per relay transaction.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import {
  claimSettlement,
  findRelayTransaction,
  markDelivered,
  markDeliveredUnrecorded,
  markRefunded,
  markRefundFailed,
  markRefundPending,
  markSettled,
  markSettleFailed,
  recordClientPayment,
  recordTargetPayment,
  storeClientTxHash,
} from '../../payments/incoming/store';
import { strandedRelayTransactions } from '../../payments/operations/relay/finish';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { FIXTURE_PAY_TO, FIXTURE_PAYER, FIXTURE_USDC, verifiedPayment } from '../support/verified-payment';

const USDC = FIXTURE_USDC;
const PAYER = FIXTURE_PAYER;
const US = FIXTURE_PAY_TO;

let database: TestDatabase;
let db: Db;
beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await database.drop();
});

describe('recordClientPayment', () => {
  it('records the payment with its request, exact amounts and the payment it can be settled from', async () => {
    const verified = verifiedPayment();
    const recorded = await recordClientPayment(db, verified, {
      targetUrl: 'https://api.example/x',
      targetMethod: 'GET',
      targetNetwork: 'solana-devnet',
      targetAmountMicroUsdc: 10_000n,
    });
    expect(recorded.ok).toBe(true);
    if (!recorded.ok) return;
    const row = recorded.value;
    expect(row).toMatchObject({
      network: 'base-sepolia',
      chain_type: 'evm',
      asset: USDC,
      payer: PAYER,
      pay_to: US,
      amount_micro: 10_300n,
      nonce_key: verified.idempotencyKey.nonceKey,
      state: 'received',
      valid_before: 4_000_000_000n,
      target_url: 'https://api.example/x',
      target_method: 'GET',
      target_network: 'solana-devnet',
      target_amount_micro: 10_000n,
      client_tx_hash: null,
    });
    expect(typeof row.id).toBe('bigint');
    expect(row.payment_payload).toEqual(verified.payment);
    expect(row.payment_requirements).toEqual(verified.requirements);
  });

  it('refuses a second use of the same nonce on the same network and asset', async () => {
    const verified = verifiedPayment();
    expect((await recordClientPayment(db, verified)).ok).toBe(true);
    const again = await recordClientPayment(db, verified);
    expect(again).toMatchObject({ ok: false, reason: 'nonce_already_used' });
    // The same nonce on another network is another payment.
    const elsewhere = {
      ...verified,
      network: 'skale-base-sepolia' as const,
      idempotencyKey: { ...verified.idempotencyKey, network: 'skale-base-sepolia' as const },
    };
    expect((await recordClientPayment(db, elsewhere)).ok).toBe(true);
  });

  it('lets exactly one of many simultaneous records of one payment through', async () => {
    const verified = verifiedPayment();
    const results = await Promise.all(Array.from({ length: 8 }, () => recordClientPayment(db, verified)));
    expect(results.filter((result) => result.ok)).toHaveLength(1);
    expect(results.filter((result) => !result.ok).map((result) => result.reason)).toEqual(
      Array(7).fill('nonce_already_used'),
    );
    const rows = await db
      .selectFrom('relay_transactions')
      .select('id')
      .where('nonce_key', '=', verified.idempotencyKey.nonceKey)
      .execute();
    expect(rows).toHaveLength(1);
  });

  it('refuses a non-positive amount in the database itself', async () => {
    await expect(recordClientPayment(db, verifiedPayment(undefined, 0n))).rejects.toThrow(/amount_micro/);
  });
});

async function newRow() {
  const recorded = await recordClientPayment(db, verifiedPayment());
  if (!recorded.ok) throw new Error('not recorded');
  return recorded.value.id;
}

describe('state moves', () => {
  it('lets only one caller claim the settlement, and stores the hash once, before settled', async () => {
    const id = await newRow();
    const claims = await Promise.all([claimSettlement(db, id, 'direct'), claimSettlement(db, id, 'direct')]);
    expect(claims.filter(Boolean)).toHaveLength(1);
    expect(await storeClientTxHash(db, id, '0xaaa')).toBe(true);
    expect(await storeClientTxHash(db, id, '0xbbb')).toBe(false);
    expect(await findRelayTransaction(db, id)).toMatchObject({
      state: 'settling',
      settle_method: 'direct',
      client_tx_hash: '0xaaa',
    });
    expect(await markSettled(db, id, '0xaaa')).toBe(true);
    const settled = await findRelayTransaction(db, id);
    expect(settled).toMatchObject({ state: 'settled', client_tx_hash: '0xaaa' });
    expect(settled?.settled_at).toBeInstanceOf(Date);
    expect(await markSettled(db, id, '0xaaa')).toBe(false);
    expect(await markSettleFailed(db, id, 'expired', 'late')).toBeUndefined();
    expect(await claimSettlement(db, id, 'direct')).toBeUndefined();
  });

  it('a delivery commits without waiting for its WAL flush (the chain shows what it records); the settled move waits', async () => {
    const id = await newRow();
    await claimSettlement(db, id, 'direct');
    const flushRule = (tx: Db) =>
      sql<{ setting: string }>`select current_setting('synchronous_commit') as setting`
        .execute(tx)
        .then(({ rows }) => rows[0]?.setting);
    const settled = await db.transaction().execute(async (tx) => ({
      moved: await markSettled(tx, id, '0xabc', { target_payment_ref: '0xref', target_network: 'base-sepolia' }),
      after: await flushRule(tx),
    }));
    expect(settled).toEqual({ moved: true, after: 'on' });
    expect(await findRelayTransaction(db, id)).toMatchObject({ state: 'settled', target_payment_ref: '0xref' });
    const delivered = await db.transaction().execute(async (tx) => ({
      moved: await markDeliveredUnrecorded(tx, id, { txHash: '0xdef', targetStatus: 200 }),
      after: await flushRule(tx),
    }));
    expect(delivered).toEqual({ moved: true, after: 'off' });
    expect(await findRelayTransaction(db, id)).toMatchObject({ state: 'delivered', target_tx_hash: '0xdef' });
    // Only that transaction: the next one flushes as before.
    expect(await db.transaction().execute(flushRule)).toBe('on');
  });

  it('fails a settlement only before it settled', async () => {
    const id = await newRow();
    expect(await markSettleFailed(db, id, 'simulation_failed', 'reverted')).toMatchObject({
      state: 'settle_failed',
      failure_reason: 'simulation_failed',
    });
    expect(await markSettled(db, id, '0x1')).toBe(false);
    expect(await markRefundPending(db, id)).toBeUndefined();
  });

  it('records the target payment on a settled row, then delivers or refunds it', async () => {
    const id = await newRow();
    expect(
      await recordTargetPayment(db, id, { network: 'solana-devnet', amountMicroUsdc: 10_000n, paymentRef: 'sig' }),
    ).toBe(false);
    await claimSettlement(db, id, 'facilitator');
    await markSettled(db, id, '0xabc');
    expect(
      await recordTargetPayment(db, id, { network: 'solana-devnet', amountMicroUsdc: 10_000n, paymentRef: 'sig' }),
    ).toBe(true);
    expect(
      await recordTargetPayment(db, id, { network: 'solana-devnet', amountMicroUsdc: 20_000n, paymentRef: 'other' }),
    ).toBe(false);
    expect(await findRelayTransaction(db, id)).toMatchObject({
      state: 'settled',
      target_network: 'solana-devnet',
      target_amount_micro: 10_000n,
      target_payment_ref: 'sig',
    });
    expect(await markDelivered(db, id, { txHash: 'target-tx' })).toMatchObject({
      state: 'delivered',
      target_tx_hash: 'target-tx',
    });
    expect(await markDelivered(db, id)).toBeUndefined();
    expect(await markRefunded(db, id)).toBeUndefined();
    expect(await markRefundPending(db, id)).toMatchObject({ state: 'refund_pending' });
    expect(await markRefundFailed(db, id)).toMatchObject({ state: 'refund_failed' });
    expect(await markRefundPending(db, id)).toMatchObject({ state: 'refund_pending' });
    expect(await markRefunded(db, id)).toMatchObject({ state: 'refunded' });
    expect(await markRefundPending(db, id)).toBeUndefined();
  });

  it('lists received and settling rows left behind for a job', async () => {
    const relayRow = async () => {
      const recorded = await recordClientPayment(db, verifiedPayment(), { mode: 'relay' });
      if (!recorded.ok) throw new Error('not recorded');
      return recorded.value.id;
    };
    const [received, settling, failed] = [await relayRow(), await relayRow(), await relayRow()];
    await claimSettlement(db, settling, 'direct');
    await markSettleFailed(db, failed, 'expired', 'late');
    // What the relay sweep looks at, with every row old enough.
    const { open } = await strandedRelayTransactions(db, new Date(Date.now() + 60_000), 0, 1000);
    expect(open).toEqual(expect.arrayContaining([received, settling]));
    expect(open).not.toContain(failed);
    const states = await db.selectFrom('relay_transactions').select('state').where('id', 'in', open).execute();
    expect(states.every(({ state }) => ['received', 'settling', 'settled'].includes(state))).toBe(true);
  });

  it('rejects a state the check constraint does not know', async () => {
    const id = await newRow();
    await expect(
      db
        .updateTable('relay_transactions')
        .set({ state: 'paid' as never })
        .where('id', '=', id)
        .execute(),
    ).rejects.toThrow(/state/);
  });
});

describe('refunds table', () => {
  async function insertRefund(relayTransactionId: bigint, status: 'pending' | 'confirmed' | 'failed') {
    return db
      .insertInto('refunds')
      .values({
        relay_transaction_id: relayTransactionId,
        network: 'base-sepolia',
        asset: USDC,
        recipient: PAYER,
        amount_micro: 1n,
        method: 'direct',
        status,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
  }

  it('holds at most one pending or confirmed refund per relay transaction; failed ones do not count', async () => {
    const id = await newRow();
    await insertRefund(id, 'failed');
    await insertRefund(id, 'failed');
    const live = await insertRefund(id, 'pending');
    await expect(insertRefund(id, 'pending')).rejects.toThrow(/refunds_one_live/);
    await expect(insertRefund(id, 'confirmed')).rejects.toThrow(/refunds_one_live/);
    await db.updateTable('refunds').set({ status: 'failed' }).where('id', '=', live.id).execute();
    await insertRefund(id, 'confirmed');
    await expect(insertRefund(id, 'pending')).rejects.toThrow(/refunds_one_live/);
  });
});
