// deliver (payments/operations/relay/outcome.ts): settled -> delivered with the target's status and hash in one
// guarded update when no record was opened for the call; with a record in flight, the move and the
// record's end (no_refund_needed) in one transaction. Never from another state, never twice.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import {
  claimSettlement,
  findRelayTransaction,
  markSettled,
  recordClientPayment,
  recordTargetPayment,
} from '../../payments/incoming/store';
import { deliver, handOver } from '../../payments/operations/relay/outcome';
import { useTestDatabase } from '../support/database';
import { verifiedPayment } from '../support/verified-payment';

const database = useTestDatabase();
let db: Db;
beforeAll(() => {
  db = database();
});

/** A relay transaction whose client paid and whose payment to the target is recorded. */
async function paidRow(): Promise<bigint> {
  const recorded = await recordClientPayment(db, verifiedPayment(), { mode: 'relay' });
  if (!recorded.ok) throw new Error(recorded.reason);
  const { id } = recorded.value;
  expect(await claimSettlement(db, id, 'facilitator')).toBeDefined();
  expect(await markSettled(db, id, '0xclient')).toBe(true);
  expect(
    await recordTargetPayment(db, id, {
      network: 'base-sepolia',
      amountMicroUsdc: 10_000n,
      paymentRef: `0x${'cd'.repeat(32)}`,
      payer: '0x3333333333333333333333333333333333333333',
      validBefore: 4_000_000_000n,
    }),
  ).toBe(true);
  return id;
}

const webhookOf = (id: string) => db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('deliver', () => {
  it('without a record: delivered with the target status and hash; a second delivery changes nothing', async () => {
    const id = await paidRow();
    expect(await deliver(db, id, { txHash: '0xtarget', targetStatus: 200 })).toBe(true);
    expect(await findRelayTransaction(db, id)).toMatchObject({
      state: 'delivered',
      target_tx_hash: '0xtarget',
      target_status: 200,
      webhook_id: null,
    });
    expect(await deliver(db, id, { txHash: '0xother', targetStatus: 201 })).toBe(false);
    expect(await findRelayTransaction(db, id)).toMatchObject({ target_tx_hash: '0xtarget', target_status: 200 });
  });

  it('with a record in flight: delivered, and the record ends as no_refund_needed with the hash', async () => {
    const id = await paidRow();
    const { webhookId } = await handOver(db, id, { kind: 'relay_refund', message: 'handed over' });
    if (!webhookId) throw new Error('no record opened');
    expect((await webhookOf(webhookId)).status).toBe('async_processing');
    expect(await deliver(db, id, { txHash: '0xtarget', targetStatus: 200 })).toBe(true);
    expect(await findRelayTransaction(db, id)).toMatchObject({
      state: 'delivered',
      target_status: 200,
      webhook_id: webhookId,
    });
    expect(await webhookOf(webhookId)).toMatchObject({ status: 'no_refund_needed', tx_hash: '0xtarget' });
  });

  it('from a state other than settled: nothing moves', async () => {
    const recorded = await recordClientPayment(db, verifiedPayment(), { mode: 'relay' });
    if (!recorded.ok) throw new Error(recorded.reason);
    expect(await deliver(db, recorded.value.id, { targetStatus: 200 })).toBe(false);
    expect(await findRelayTransaction(db, recorded.value.id)).toMatchObject({ state: 'received', target_status: null });
  });
});
