// The lease of a claimed call (payments/basics/idempotency.ts): a repeat that finds a running record
// whose owner stopped renewing it answers from the money records that carry the claim. No money:
// the repeat takes the claim over, and the first claim can then record nothing (a process that was
// only stalled cannot move money after a repeat ran the call). Money still open: running. Money
// ended: the outcome (credits charged or released; the relay transaction's end), never a second run.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testPaymentChoice } from '../support/payments';
import type { Db } from '../../db/index';
import { organisationBalance } from '../../payments/accounts/credits';
import {
  claimIdempotencyKey,
  IdempotencyClaimLost,
  renewIdempotencyLeases,
  type ClaimOwner,
  type ClaimRef,
} from '../../payments/basics/idempotency';
import {
  chargeProxyPayment,
  holdProxyPayment,
  releaseProxyPayment,
  type NewProxyPayment,
} from '../../payments/operations/proxy/records';
import type { PaymentChoice } from '../../payments/x402/choose';
import {
  claimSettlement,
  markDelivered,
  markSettled,
  recordClientPayment,
  storeClientTxHash,
} from '../../payments/incoming/store';
import { verifiedPayment } from '../support/verified-payment';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { NO_POLICY } from '../../payments/accounts/policy';

const LEASE_MS = 1_000;
const dead: ClaimOwner = { instanceId: 'instance-that-dies', leaseMs: LEASE_MS };
const alive: ClaimOwner = { instanceId: 'instance-after-restart', leaseMs: LEASE_MS };

let database: TestDatabase;
let db: Db;

beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await database.drop();
});

const CHOICE: PaymentChoice = testPaymentChoice();

function newPayment(account: TestAccount, idempotency: ClaimRef): NewProxyPayment {
  return {
    reference: `0x${randomBytes(32).toString('hex')}`,
    key: { ...account, dailyCapCredits: 1_000_000n, policy: NO_POLICY },
    requestId: 'req-1',
    idempotency,
    targetUrl: 'http://target.test/paid',
    choice: CHOICE,
    credits: 13n,
    day: '2028-01-01',
    accountDailyLimitCredits: 1_000_000n,
    systemDailyLimitCredits: 1_000_000_000n,
  };
}

let keys = 0;
async function claimedByDeadInstance(account: TestAccount): Promise<ClaimRef> {
  keys += 1;
  const claim = await claimIdempotencyKey(
    db,
    { scope: `proxy:${account.accountId}`, key: `k${keys}` },
    'POST /proxy x',
    {
      owner: dead,
    },
  );
  if (claim.kind !== 'claimed') throw new Error(`not claimed: ${claim.kind}`);
  return claim.ref;
}

const lapse = () => new Promise((resolve) => setTimeout(resolve, LEASE_MS + 200));
const repeat = (ref: ClaimRef) =>
  claimIdempotencyKey(db, { scope: ref.scope, key: ref.key }, 'POST /proxy x', { owner: alive });

describe('a running record whose lease lapsed', () => {
  it('is running while its owner renews the lease, however long the call takes', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const ref = await claimedByDeadInstance(account);
    for (let beat = 0; beat < 4; beat += 1) {
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 3));
      expect(await renewIdempotencyLeases(db, dead)).toBeGreaterThanOrEqual(1);
    }
    expect(await repeat(ref)).toMatchObject({ kind: 'running' });
  });

  it('without money: the repeat takes the claim over, and the first claim can record none any more', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const ref = await claimedByDeadInstance(account);
    await lapse();
    const taken = await repeat(ref);
    expect(taken.kind).toBe('claimed');
    if (taken.kind !== 'claimed') return;
    expect(taken.ref.claim).not.toBe(ref.claim);
    // The stalled first process wakes up and tries to reserve: refused, nothing written.
    await expect(holdProxyPayment(db, newPayment(account, ref))).rejects.toBeInstanceOf(IdempotencyClaimLost);
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n);
    // The new claim records as usual.
    expect(await holdProxyPayment(db, newPayment(account, taken.ref))).toMatchObject({ ok: true });
    expect(await organisationBalance(db, account.organisationId)).toBe(987n);
    expect(await repeat(ref)).toMatchObject({ kind: 'running' });
  });

  it('with money still open: running; once it ended: the outcome, charged or released', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const charged = await claimedByDeadInstance(account);
    const chargedPayment = newPayment(account, charged);
    // Held as /proxy holds it: signed beforehand, recorded signed with the reservation.
    const signed = { payer: '0x2222222222222222222222222222222222222222' };
    expect(await holdProxyPayment(db, chargedPayment, signed)).toMatchObject({ ok: true });
    const released = await claimedByDeadInstance(account);
    const releasedPayment = newPayment(account, released);
    expect(await holdProxyPayment(db, releasedPayment)).toMatchObject({ ok: true });
    await lapse();
    expect(await repeat(charged)).toMatchObject({ kind: 'running' });
    expect(await repeat(released)).toMatchObject({ kind: 'running' });

    expect(await chargeProxyPayment(db, chargedPayment.reference, { txHash: '0xabc', outcome: 'on chain' })).toBe(true);
    expect(await releaseProxyPayment(db, releasedPayment.reference, { outcome: 'never signed' })).toBe(true);
    expect(await repeat(charged)).toEqual({
      kind: 'ended',
      ref: charged,
      payment: null,
      money: { kind: 'proxy', chargedCredits: 13n, txHashes: ['0xabc'], webhookId: null },
    });
    expect(await repeat(released)).toMatchObject({
      kind: 'ended',
      ref: released,
      money: { kind: 'proxy', chargedCredits: 0n, txHashes: [] },
    });
    expect(await organisationBalance(db, account.organisationId)).toBe(987n);
  });
});

describe('a relay whose process died', () => {
  it('is running until its relay transaction ends, then answered from it (delivered: with the client payment)', async () => {
    const claim = await claimIdempotencyKey(db, { scope: 'relay-nonce', key: 'v1:dead-relay' }, 'POST /relay x', {
      owner: dead,
    });
    if (claim.kind !== 'claimed') throw new Error(claim.kind);
    const recorded = await recordClientPayment(db, verifiedPayment(), { idempotencyClaim: claim.ref.claim });
    if (!recorded.ok) throw new Error(recorded.reason);
    const id = recorded.value.id;
    await lapse();
    const again = () =>
      claimIdempotencyKey(db, { scope: 'relay-nonce', key: 'v1:dead-relay' }, 'POST /relay x', { owner: alive });
    expect(await again()).toMatchObject({ kind: 'running' });
    await claimSettlement(db, id, 'direct');
    await storeClientTxHash(db, id, '0xclient');
    await markSettled(db, id, '0xclient');
    expect(await again()).toMatchObject({ kind: 'running' });
    await markDelivered(db, id, { txHash: '0xtarget' });
    expect(await again()).toMatchObject({
      kind: 'ended',
      ref: claim.ref,
      money: {
        kind: 'relay',
        relayTxId: id,
        state: 'delivered',
        clientTxHash: '0xclient',
        targetTxHash: '0xtarget',
        amountMicro: 10_300n,
      },
    });
  });
});
