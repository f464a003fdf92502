// The admission of a verified /relay payment, one statement (db/functions/admit_relay_payment.sql
// through payments/operations/relay/admit.ts): the row (with its first look), both daily counters and the follow job together, or,
// for a repeated nonce, a limit or a lost idempotency claim, nothing at all.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { claimIdempotencyKey, IdempotencyClaimLost, type ClaimRef } from '../../payments/basics/idempotency';
import { moveRelayTransaction } from '../../payments/incoming/states';
import { findRelayTransaction, markSettleFailed } from '../../payments/incoming/store';
import { spentOn, type SpendKey } from '../../payments/accounts/limits';
import { admitClientPayment } from '../../payments/operations/relay/admit';
import { useTestDatabase } from '../support/database';
import { verifiedPayment } from '../support/verified-payment';

const database = useTestDatabase();
let db: Db;
beforeAll(() => {
  db = database();
});

const LIMITS = { perWalletMicro: 100_000_000n, systemMicro: 1_000_000_000n };
let days = 0;
/** A day of its own for each test, so that counters start at zero. */
const freshDay = () => `2031-01-${String((days += 1)).padStart(2, '0')}`;

const counters = (payer: string, day: string): [SpendKey, SpendKey] => [
  { scope: 'relay_wallet', scopeId: payer, networkClass: 'testnet', day },
  { scope: 'relay_system', scopeId: 'system', networkClass: 'testnet', day },
];

async function followJobs() {
  const { rows } = await sql<{ key: string; task: string; payload: unknown; run_at: Date; max_attempts: number }>`
    select j.key, t.identifier as task, j.payload, j.run_at, j.max_attempts
    from graphile_worker._private_jobs j join graphile_worker._private_tasks t on t.id = j.task_id
    where j.key = 'relay_follow' or j.key like 'relay_watch:%'`.execute(db);
  return rows;
}

async function lookAt(id: bigint): Promise<Date | null> {
  const { rows } = await sql<{ look_at: Date | null }>`select look_at from relay_transactions where id = ${id}`.execute(
    db,
  );
  return rows[0]!.look_at;
}

async function relayRowCount(): Promise<number> {
  const { rows } = await sql<{ count: string }>`select count(*)::text as count from relay_transactions`.execute(db);
  return Number(rows[0]!.count);
}

describe('admitClientPayment', () => {
  it('records the payment, counts it against both daily limits and queues the follow job for its look, in one go', async () => {
    const day = freshDay();
    const verified = verifiedPayment(undefined, 12_716n);
    const finishBy = new Date(Date.now() + 60_000);
    const admitted = await admitClientPayment(
      db,
      verified,
      { targetUrl: 'http://127.0.0.1:9/paid', targetMethod: 'GET', spendDay: day, mode: 'relay' },
      { ...LIMITS, finishBy },
    );
    if (!admitted.ok) throw new Error(admitted.reason);
    const row = await findRelayTransaction(db, admitted.value.id);
    expect(row).toMatchObject({
      state: 'received',
      network: 'base-sepolia',
      chain_type: 'evm',
      payer: verified.payer,
      pay_to: verified.payTo,
      asset: verified.asset,
      amount_micro: 12_716n,
      nonce_key: verified.idempotencyKey.nonceKey,
      payment_payload: verified.payment,
      payment_requirements: verified.requirements,
      valid_before: 4_000_000_000n,
      target_url: 'http://127.0.0.1:9/paid',
      target_method: 'GET',
      spend_day: day,
      mode: 'relay',
      idempotency_claim: null,
    });
    const [wallet, system] = counters(verified.payer, day);
    expect(await spentOn(db, wallet)).toBe(12_716n);
    expect(await spentOn(db, system)).toBe(12_716n);
    // The row is the queue: it says when it is looked at, and the one follow job is queued for then.
    expect(Math.abs((await lookAt(admitted.value.id))!.getTime() - finishBy.getTime())).toBeLessThan(1_000);
    const jobs = await followJobs();
    expect(jobs).toEqual([
      { key: 'relay_follow', task: 'relay_follow', payload: {}, run_at: expect.any(Date), max_attempts: 25 },
    ]);
    expect(Math.abs(jobs[0]!.run_at.getTime() - finishBy.getTime())).toBeLessThan(1_000);

    // A payment looked at later adds no job; one looked at sooner brings the job forward.
    const admit = (at: Date) =>
      admitClientPayment(db, verifiedPayment(), { spendDay: day, mode: 'relay' }, { ...LIMITS, finishBy: at });
    expect((await admit(new Date(finishBy.getTime() + 60_000))).ok).toBe(true);
    expect((await followJobs()).map((job) => job.run_at)).toEqual([jobs[0]!.run_at]);
    const sooner = new Date(Date.now() + 10_000);
    expect((await admit(sooner)).ok).toBe(true);
    const [forward, ...others] = await followJobs();
    expect(others).toEqual([]);
    expect(Math.abs(forward!.run_at.getTime() - sooner.getTime())).toBeLessThan(1_000);
  });

  it('a permit paid by upto is recorded as upto with its maximum by the admission itself: no moment says exact', async () => {
    const day = freshDay();
    const verified = verifiedPayment(undefined, 20_600n);
    const admitted = await admitClientPayment(
      db,
      verified,
      { spendDay: day, mode: 'relay' },
      { ...LIMITS, finishBy: new Date() },
      { maximumAtomic: 20_600_000_000_000_000n, exposurePerWalletMicro: 100_000n, exposureTotalMicro: 1_000_000n },
    );
    if (!admitted.ok) throw new Error(admitted.reason);
    expect(await findRelayTransaction(db, admitted.value.id)).toMatchObject({
      state: 'received',
      scheme: 'upto',
      maximum_atomic: '20600000000000000',
      settled_atomic: null,
      amount_micro: 20_600n,
    });
    const exact = await admitClientPayment(
      db,
      verifiedPayment(),
      { spendDay: day, mode: 'relay' },
      {
        ...LIMITS,
        finishBy: new Date(),
      },
    );
    if (!exact.ok) throw new Error(exact.reason);
    expect(await findRelayTransaction(db, exact.value.id)).toMatchObject({ scheme: 'exact', maximum_atomic: null });
  });

  it('the same payment twice at once: one admission, counted once; the other is refused for its nonce', async () => {
    const day = freshDay();
    const verified = verifiedPayment();
    const finishBy = new Date();
    const both = await Promise.all(
      [0, 1].map(() => admitClientPayment(db, verified, { spendDay: day, mode: 'relay' }, { ...LIMITS, finishBy })),
    );
    expect(both.filter((each) => each.ok)).toHaveLength(1);
    expect(both.find((each) => !each.ok)).toEqual({
      ok: false,
      reason: 'nonce_already_used',
      details: expect.stringContaining(verified.idempotencyKey.nonceKey),
    });
    const [wallet, system] = counters(verified.payer, day);
    expect(await spentOn(db, wallet)).toBe(10_300n);
    expect(await spentOn(db, system)).toBe(10_300n);
  });

  it.each([
    ['wallet', { perWalletMicro: 10_000n, systemMicro: 1_000_000_000n }, 0n],
    ['system', { perWalletMicro: 100_000_000n, systemMicro: 15_000n }, 10_300n],
  ] as const)(
    'over the %s limit: the refusal with its figures, and nothing written (no row, no counter moved, no job)',
    async (scope, limits, systemBefore) => {
      const day = freshDay();
      const [wallet, system] = counters(verifiedPayment().payer, day);
      if (systemBefore > 0n) {
        const first = await admitClientPayment(
          db,
          verifiedPayment(),
          { spendDay: day, mode: 'relay' },
          { ...LIMITS, finishBy: new Date() },
        );
        expect(first.ok).toBe(true);
      }
      const walletBefore = await spentOn(db, wallet);
      const rowsBefore = await relayRowCount();
      const verified = verifiedPayment();
      const refused = await admitClientPayment(
        db,
        verified,
        { spendDay: day, mode: 'relay' },
        { ...limits, finishBy: new Date() },
      );
      expect(refused).toEqual({
        ok: false,
        reason: 'limit_exceeded',
        refusal: {
          scope,
          spentMicro: scope === 'wallet' ? walletBefore : systemBefore,
          limitMicro: scope === 'wallet' ? limits.perWalletMicro : limits.systemMicro,
          requestedMicro: 10_300n,
        },
      });
      expect(await relayRowCount()).toBe(rowsBefore);
      expect(await spentOn(db, wallet)).toBe(walletBefore);
      expect(await spentOn(db, system)).toBe(systemBefore);
      const { rows } = await sql<{ count: string }>`
        select count(*)::text as count from relay_transactions where nonce_key = ${verified.idempotencyKey.nonceKey}`.execute(
        db,
      );
      expect(rows[0]!.count).toBe('0');
      // Refused, the nonce stays unused: the same payment is admitted once the limit allows it.
      const later = await admitClientPayment(
        db,
        verified,
        { spendDay: day, mode: 'relay' },
        { ...LIMITS, finishBy: new Date() },
      );
      expect(later.ok).toBe(true);
    },
  );

  it("over the system limit, the wallet's counter this admission wrote first is removed, not left at zero", async () => {
    const day = freshDay();
    const [wallet, system] = counters(verifiedPayment().payer, day);
    // The service's counter near its limit (other wallets' payments); this wallet has none yet.
    await sql`insert into daily_spend (scope, scope_id, network_class, day, spent_micro_usdc)
      values ('relay_system', 'system', 'testnet', ${day}::date, 10000)`.execute(db);
    const rowsBefore = await relayRowCount();
    const refused = await admitClientPayment(
      db,
      verifiedPayment(),
      { spendDay: day, mode: 'relay' },
      { perWalletMicro: 100_000_000n, systemMicro: 15_000n, finishBy: new Date() },
    );
    expect(refused).toEqual({
      ok: false,
      reason: 'limit_exceeded',
      refusal: { scope: 'system', spentMicro: 10_000n, limitMicro: 15_000n, requestedMicro: 10_300n },
    });
    const { rows } = await sql<{ scope: string; spent: string }>`
      select scope, spent_micro_usdc::text as spent from daily_spend where day = ${day}::date order by scope`.execute(
      db,
    );
    expect(rows).toEqual([{ scope: 'relay_system', spent: '10000' }]);
    expect(await spentOn(db, wallet)).toBe(0n);
    expect(await spentOn(db, system)).toBe(10_000n);
    expect(await relayRowCount()).toBe(rowsBefore);
  });

  it('under an idempotency claim: the row carries the claim; a claim taken over writes nothing and throws', async () => {
    const day = freshDay();
    const claimed = await claimIdempotencyKey(db, { scope: 'relay-nonce', key: randomUUID() }, 'POST /relay x');
    if (claimed.kind !== 'claimed') throw new Error(claimed.kind);
    const admitted = await admitClientPayment(
      db,
      verifiedPayment(),
      { spendDay: day, mode: 'relay', idempotency: claimed.ref },
      { ...LIMITS, finishBy: new Date() },
    );
    if (!admitted.ok) throw new Error(admitted.reason);
    expect((await findRelayTransaction(db, admitted.value.id))?.idempotency_claim).toBe(claimed.ref.claim);

    const lost: ClaimRef = { ...claimed.ref, claim: randomUUID() };
    const rowsBefore = await relayRowCount();
    const verified = verifiedPayment();
    await expect(
      admitClientPayment(
        db,
        verified,
        { spendDay: day, mode: 'relay', idempotency: lost },
        { ...LIMITS, finishBy: new Date() },
      ),
    ).rejects.toBeInstanceOf(IdempotencyClaimLost);
    expect(await relayRowCount()).toBe(rowsBefore);
    expect(await spentOn(db, counters(verified.payer, day)[0])).toBe(10_300n);
  });

  it('an upto permit counts its maximum against the bounds on open upto maxima until its row is settled or ended; a defaulted payer is refused; a refusal writes nothing', async () => {
    const day = freshDay();
    const payer = '0x3333333333333333333333333333333333333333';
    const other = '0x4444444444444444444444444444444444444444';
    const open = async (scope: 'wallet' | 'total', scopeId: string) =>
      (
        await db
          .selectFrom('upto_exposure')
          .select('open_micro')
          .where('scope', '=', scope)
          .where('scope_id', '=', scopeId)
          .where('network_class', '=', 'testnet')
          .executeTakeFirst()
      )?.open_micro ?? 0n;
    const totalBefore = await open('total', 'system');
    const bounds = { exposurePerWalletMicro: 20_600n, exposureTotalMicro: totalBefore + 31_000n };
    const admit = (from: string, upto = true) =>
      admitClientPayment(
        db,
        { ...verifiedPayment(), payer: from },
        { spendDay: day, mode: 'relay' },
        { ...LIMITS, finishBy: new Date() },
        upto ? { maximumAtomic: 10_300n, ...bounds } : undefined,
      );
    const first = await admit(payer);
    const second = await admit(payer);
    if (!first.ok || !second.ok) throw new Error('not admitted');
    expect(await findRelayTransaction(db, first.value.id)).toMatchObject({ upto_exposure_class: 'testnet' });
    const rowsBefore = await relayRowCount();
    // The wallet's bound: two maxima of 10,300 fill its 20,600.
    expect(await admit(payer)).toEqual({
      ok: false,
      reason: 'upto_exposure_exceeded',
      exposure: { scope: 'wallet', openMicro: 20_600n, limitMicro: 20_600n, requestedMicro: 10_300n },
    });
    // The service's bound: with 30,900 open of 31,000, another wallet's 10,300 does not fit.
    const third = await admit(other);
    if (!third.ok) throw new Error('not admitted');
    expect(await admit(other)).toEqual({
      ok: false,
      reason: 'upto_exposure_exceeded',
      exposure: {
        scope: 'total',
        openMicro: totalBefore + 30_900n,
        limitMicro: totalBefore + 31_000n,
        requestedMicro: 10_300n,
      },
    });
    // A refusal wrote nothing: no row, no daily spend, the other wallet's open maxima as they were.
    expect(await relayRowCount()).toBe(rowsBefore + 1);
    expect(await spentOn(db, counters(payer, day)[0])).toBe(20_600n);
    expect(await spentOn(db, counters(other, day)[0])).toBe(10_300n);
    expect([await open('wallet', payer), await open('wallet', other), await open('total', 'system')]).toEqual([
      20_600n,
      10_300n,
      totalBefore + 30_900n,
    ]);

    // Settling keeps it open; settled or settle_failed takes it back, once.
    await moveRelayTransaction(db, first.value.id, 'settling');
    expect(await open('wallet', payer)).toBe(20_600n);
    await moveRelayTransaction(db, first.value.id, 'settled', { client_tx_hash: `0x${'cd'.repeat(32)}` });
    await markSettleFailed(db, second.value.id, 'target_never_charged', 'test');
    expect([await open('wallet', payer), await open('total', 'system')]).toEqual([0n, totalBefore + 10_300n]);
    expect(await findRelayTransaction(db, second.value.id)).toMatchObject({ upto_exposure_class: null });
    await moveRelayTransaction(db, first.value.id, 'delivered');
    expect(await open('total', 'system')).toBe(totalBefore + 10_300n);
    // An emptied wallet counter is removed, not left at zero.
    expect(await db.selectFrom('upto_exposure').selectAll().where('scope_id', '=', payer).execute()).toEqual([]);

    // A payer that once failed to pay an upto charge: its permits are refused, its exact payments admitted.
    await db
      .insertInto('upto_defaulted_payers')
      .values({ payer, network: 'base-sepolia', relay_transaction_id: second.value.id, reason: 'test', lost_micro: 1n })
      .execute();
    const rowsNow = await relayRowCount();
    expect(await admit(payer)).toMatchObject({ ok: false, reason: 'upto_payer_defaulted' });
    expect(await relayRowCount()).toBe(rowsNow);
    expect((await admit(payer, false)).ok).toBe(true);
    await markSettleFailed(db, third.value.id, 'target_never_charged', 'test');
    expect(await open('total', 'system')).toBe(totalBefore);
  });
});
