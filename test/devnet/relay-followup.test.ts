// The relay's jobs, run step by step against the local peers (no worker in this process, so each
// step is the test's to take): a payment whose request died before settling is given up and its
// daily spend taken back; a target that charged after its request was gone makes the record
// no_refund_needed; a refund that cannot be made is tried MAX_REFUND_ATTEMPTS times, then the
// record says refund_failed. Every step repeated changes nothing more.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { utcDay, type Clock } from '../../payments/basics/clock';
import { loadConfig } from '../../payments/basics/config';
import type { Deps } from '../../payments/deps';
import { spentOn } from '../../payments/accounts/limits';
import type { Chains } from '../../payments/chains/index';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { admitClientPayment } from '../../payments/operations/relay/admit';
import { followUpRefund, followUpRelay, MAX_REFUND_ATTEMPTS } from '../../payments/operations/relay/finish';
import { scheduleRefund, targetPaymentOf, watchTargetPayment } from '../../payments/operations/relay/outcome';
import { IN_PROCESS_ONLY, SubmissionQueue } from '../../payments/chains/submissions';
import {
  claimSettlement,
  findRelayTransaction,
  markSettled,
  recordClientPayment,
  recordTargetPayment,
} from '../../payments/incoming/store';
import { DEFAULT_PAYMENT_BOUNDS } from '../../payments/incoming/types';
import {
  decidePayment,
  paymentRequiredOf,
  signedFacts,
  signTargetPayment,
  readPaymentOnChain,
  WalletBalances,
} from '../../payments/outgoing/index';
import { findWebhook } from '../../payments/tracking/webhooks';
import { startPeers, type Peers } from '../../devnet/index';
import { generateSolanaKey } from '../../devnet/svm/keys';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { createPeerChains, relayOffer, verifyXPayment } from '../support/chains';
import { ifStarted } from '../support/teardown';

const ABANDONED_AFTER_MS = 60_000;

let peers: Peers;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'submissions' | 'config' | 'paymentBounds' | 'balances'>;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia', 'solana-devnet'] });
  chains = await createPeerChains(peers, ['base-sepolia', 'solana-devnet']);
  database = await createTestDatabase();
  db = database.handle.db;
  deps = {
    db,
    chains,
    clock: { now: () => new Date() },
    submissions: new SubmissionQueue(IN_PROCESS_ONLY),
    config: loadConfig({ RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS) }),
    paymentBounds: DEFAULT_PAYMENT_BOUNDS,
    balances: new WalletBalances(),
  };
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
});

const later = (ms: number): Clock => ({ now: () => new Date(Date.now() + ms) });

/** A settled relay transaction paid by `payer` (its client payment is not on any chain: only what follows it is tested). */
async function settledRow(network: 'base-sepolia' | 'solana-devnet', payer: string, nonceKey: string) {
  const offer = await relayOffer(chains, network, { amountMicroUsdc: 10_300n, resource: 'http://127.0.0.1/relay' });
  const recorded = await recordClientPayment(
    db,
    {
      network,
      chainType: NETWORK_TABLE[network].chainType,
      payer,
      payTo: offer.payTo,
      asset: offer.asset,
      amountMicroUsdc: 10_300n,
      idempotencyKey: { network, asset: offer.asset, nonceKey },
      payment: { x402Version: 1, scheme: 'exact', network, payload: { transaction: 'AA==' } },
      requirements: offer,
    },
    { mode: 'relay', targetUrl: peers.targets['base-sepolia']!.routes.paid.url, targetMethod: 'GET' },
  );
  if (!recorded.ok) throw new Error(recorded.details);
  await claimSettlement(db, recorded.value.id, 'direct');
  await markSettled(db, recorded.value.id, `client-${nonceKey}`);
  return recorded.value.id;
}

/**
 * A client's payment of 10,300 micro-USDC on base-sepolia, verified and admitted (received, or
 * already settling by `settleMethod`) and never settled; its wallet's daily counter.
 */
async function admittedPayment(settleMethod?: 'direct' | 'facilitator') {
  const offer = await relayOffer(chains, 'base-sepolia', {
    amountMicroUsdc: 10_300n,
    resource: 'http://127.0.0.1/relay',
  });
  const { header, payment } = await peers.signEvmPayment(offer);
  const verified = await verifyXPayment(header, [offer], deps);
  if (!verified.ok) throw new Error(verified.details);
  const day = utcDay(new Date());
  const admitted = await admitClientPayment(
    db,
    verified.value,
    { mode: 'relay', spendDay: day, ...(settleMethod ? { settleMethod } : {}) },
    { perWalletMicro: 100_000_000n, systemMicro: 1_000_000_000n, finishBy: new Date() },
  );
  if (!admitted.ok) throw new Error(admitted.reason);
  const wallet = {
    scope: 'relay_wallet' as const,
    scopeId: verified.value.payer,
    networkClass: 'testnet' as const,
    day,
  };
  return { id: admitted.value.id, payment, wallet };
}

describe('a payment whose request died before anything of it was sent', () => {
  it.each([
    ['received', undefined],
    ['already settling by our wallet, nothing stored to broadcast', 'direct'],
  ] as const)(
    'admitted %s: given up once the request must be over; its daily spend is taken back; nothing moved',
    async (_, settleMethod) => {
      const { id, payment, wallet } = await admittedPayment(settleMethod);
      const state = settleMethod === undefined ? 'received' : 'settling';
      const spent = await spentOn(db, wallet);
      expect(spent).toBeGreaterThanOrEqual(10_300n);

      expect(await followUpRelay(id, deps)).toMatchObject({ kind: 'look_again' });
      expect(await findRelayTransaction(db, id)).toMatchObject({ state, settle_method: settleMethod ?? null });
      const abandoned = { ...deps, clock: later(ABANDONED_AFTER_MS + 1) };
      expect(await followUpRelay(id, abandoned)).toMatchObject({ kind: 'done' });
      expect(await findRelayTransaction(db, id)).toMatchObject({
        state: 'settle_failed',
        failure_reason: 'abandoned',
        spend_day: null,
      });
      expect(await spentOn(db, wallet)).toBe(spent - 10_300n);
      expect(await followUpRelay(id, abandoned)).toMatchObject({ kind: 'done' });
      expect(await spentOn(db, wallet)).toBe(spent - 10_300n);
      const nonceUsed = await chains.evm.authorizationState(
        'base-sepolia',
        payment.payload.authorization.from,
        payment.payload.authorization.nonce,
      );
      expect(nonceUsed).toEqual({ ok: true, value: false });
    },
  );

  it('through the facilitator: it may have sent it, so the chain decides; open while the authorization can still be used', async () => {
    const { id, wallet } = await admittedPayment('facilitator');
    const spent = await spentOn(db, wallet);

    const abandoned = { ...deps, clock: later(ABANDONED_AFTER_MS + 1) };
    expect(await followUpRelay(id, abandoned)).toMatchObject({ kind: 'look_again' });

    expect(await findRelayTransaction(db, id)).toMatchObject({ state: 'settling', settle_method: 'facilitator' });
    expect(await spentOn(db, wallet)).toBe(spent);
  });
});

describe('a target that charged after its request was gone', () => {
  it('the watch reads our payment on-chain: delivered, and the record says no_refund_needed', async () => {
    const id = await settledRow('base-sepolia', peers.wallets.client.evm.address, `0x${'ab'.repeat(32)}`);
    const url = peers.targets['base-sepolia']!.routes.paid.url;
    const required = paymentRequiredOf({
      status: 402,
      headers: {},
      body: Buffer.from(await (await fetch(url)).text()),
      url,
    });
    const decision = decidePayment(required!, { chains, maxAmountMicroUsdc: 1_000_000n });
    if (!decision.ok) throw new Error(decision.details);
    const signed = await signTargetPayment(deps, decision.value, { windowSeconds: 60 });
    if (!signed.ok) throw new Error(signed.details);
    await recordTargetPayment(db, id, {
      network: 'base-sepolia',
      amountMicroUsdc: decision.value.amountMicroUsdc,
      paymentRef: signed.value.reference,
      ...signedFacts(signed.value),
    });
    const watched = await watchTargetPayment(db, id, { targetStatus: 402 });
    expect(await followUpRelay(id, deps)).toMatchObject({ kind: 'look_again' });

    const paid = await fetch(url, { headers: { 'X-PAYMENT': signed.value.header } });
    expect(paid.status).toBe(200);
    const done = await followUpRelay(id, deps);
    expect(done).toMatchObject({ kind: 'done', details: expect.stringContaining('the target charged') });
    const row = (await findRelayTransaction(db, id))!;
    expect(row).toMatchObject({ state: 'delivered', target_tx_hash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    expect(await readPaymentOnChain(chains, targetPaymentOf(row), { now: new Date() })).toMatchObject({
      state: 'settled',
    });
    expect(await findWebhook(db, watched!.webhookId)).toMatchObject({
      status: 'no_refund_needed',
      txHash: row.target_tx_hash,
      relayTxId: Number(id),
    });
    expect(await followUpRelay(id, deps)).toMatchObject({
      kind: 'done',
      details: expect.stringContaining('nothing to do'),
    });
  });
});

describe('a refund that cannot be made', () => {
  it(`is tried ${MAX_REFUND_ATTEMPTS} times, then the record says refund_failed; one refund at most is ever live`, async () => {
    // A payer without a USDC account: we never pay into a missing one.
    const stranger = await generateSolanaKey();
    const id = await settledRow('solana-devnet', stranger.address, 'stranger-signature');
    const scheduled = await scheduleRefund(db, id, { reason: 'the target never charged' });
    expect(scheduled).toEqual({ webhookId: expect.any(String) });
    expect(await scheduleRefund(db, id, { reason: 'again' })).toBeUndefined();

    const steps = [];
    for (let attempt = 1; attempt <= MAX_REFUND_ATTEMPTS + 1; attempt += 1) steps.push(await followUpRefund(id, deps));
    expect(
      steps
        .slice(0, MAX_REFUND_ATTEMPTS - 1)
        .every((step) => step.kind !== 'done' && step.details.includes('destination_account_missing')),
    ).toBe(true);
    expect(steps[MAX_REFUND_ATTEMPTS - 1]).toMatchObject({
      kind: 'done',
      details: `refund given up after ${MAX_REFUND_ATTEMPTS} attempts`,
    });
    const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', id).execute();
    expect(refunds.map((refund) => refund.status)).toEqual(Array(MAX_REFUND_ATTEMPTS).fill('failed'));
    expect((await findRelayTransaction(db, id))!.state).toBe('refund_failed');
    expect(await findWebhook(db, scheduled!.webhookId)).toMatchObject({
      status: 'failed',
      errorType: 'refund_failed',
      relayTxId: Number(id),
      error: expect.stringContaining('destination_account_missing'),
    });
  });
});
