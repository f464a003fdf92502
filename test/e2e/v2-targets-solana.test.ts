// Paying a Solana target that speaks x402 version 2: `v2-solana-devnet`, served by the unmodified
// @x402/express 2.27 with @x402/svm's exact server scheme, verified and settled by @x402/core's
// facilitator with @x402/svm's exact facilitator scheme on the local cluster. /proxy and /relay pay
// it (PAYMENT-SIGNATURE, `accepted` echoing its offer, fee payer = the v2 facilitator's key named in
// the offer); /proxy/sim and /relay/sim price it. Every answer is checked against the document by
// the contract client (or contractFetch under x402-fetch); every money leg is read from the ledger.
import {
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
  type Address,
} from '@solana/kit';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { CAIP2_NETWORKS, v2TargetName, type Peers, type Target } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import {
  expectOurReceipt,
  expectProxyCharged,
  expectRelayDelivered,
  paidCallAfter,
  v2PaymentOf,
  withoutTargetHeaders,
} from '../support/paid-target';
import { startPeersAndProxyService } from '../support/proxy';
import { payingFetch, relayRequest } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'solana-devnet';
const CAIP2 = CAIP2_NETWORKS[NETWORK];
const PRICE = 12_345n;
/** ceil(12,345 x 1.03) micro-USDC: what a /relay client pays. */
const RELAY_TOTAL = 12_716n;
/** ceil(12,345 x 1.03 / 1000) credits: what a /proxy account pays. */
const CREDITS = 13n;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = (): Target => peers.targets[v2TargetName(NETWORK)]!;
const service = () => peers.wallets.service.solana.address;
const client = () => peers.wallets.client.solana.address;

async function balances() {
  return {
    service: await peers.usdcBalance(NETWORK, service()),
    client: await peers.usdcBalance(NETWORK, client()),
    target: await peers.usdcBalance(NETWORK, target().routes.paid.payTo),
  };
}

/** The USDC each owner gained (or lost) in one executed transaction, read from the ledger's balances. */
function usdcMoves(signature: string): Record<string, bigint> {
  const executed = peers.solanaLedgers[NETWORK]!.executedTransaction(signature);
  expect(executed, `transaction ${signature} on the ledger`).toBeDefined();
  expect(executed!.err).toBeNull();
  const moves: Record<string, bigint> = {};
  for (const post of executed!.postTokenBalances) {
    const pre = executed!.preTokenBalances.find((balance) => balance.accountIndex === post.accountIndex);
    const delta = post.amount - (pre?.amount ?? 0n);
    if (delta !== 0n) moves[post.owner] = delta;
  }
  return moves;
}

/** The fee payer of an executed transaction (its first account). */
function feePayerOf(signature: string): Address {
  const executed = peers.solanaLedgers[NETWORK]!.executedTransaction(signature)!;
  const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(executed.wireTransactionBase64));
  return getCompiledTransactionMessageDecoder().decode(transaction.messageBytes).staticAccounts[0]!;
}

/**
 * What the target saw: `unpaidCalls` unpaid calls, then one paid call with PAYMENT-SIGNATURE whose
 * `accepted` is its own offer verbatim. Returns the settlement transaction it reported.
 */
async function checkTargetSide(unpaidCalls: number): Promise<string> {
  const paid = paidCallAfter(target(), unpaidCalls);
  const { payment } = await v2PaymentOf(target(), paid);
  expect(payment.accepted).toMatchObject({
    network: CAIP2,
    amount: PRICE.toString(),
    extra: { feePayer: peers.facilitatorV2.solanaFeePayer },
  });
  expect(payment.payload).toHaveProperty('transaction');
  const settlement = decodePaymentResponseHeader(paid.paymentResponse!);
  expect(settlement).toMatchObject({ success: true, network: CAIP2, payer: service() });
  return settlement.transaction;
}

describe('a Solana target served by @x402/express 2.27 (x402 version 2, @x402/svm)', () => {
  it('/proxy pays it in version 2: the target gets exactly the price, the account exactly the credits', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await balances();
    const settles = peers.facilitatorV2.calls.filter((call) => call.path === '/settle').length;

    const res = await t.client.post(
      '/proxy',
      { api_url: target().routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'paid', target: target().name, network: NETWORK });
    withoutTargetHeaders(res.headers);
    const targetTx = await checkTargetSide(1);
    expectOurReceipt(res.headers, NETWORK, service(), targetTx);
    expect(usdcMoves(targetTx)).toEqual({ [service()]: -PRICE, [target().routes.paid.payTo]: PRICE });
    expect(feePayerOf(targetTx)).toBe(peers.facilitatorV2.solanaFeePayer);
    expect(peers.facilitatorV2.calls.filter((call) => call.path === '/settle')).toHaveLength(settles + 1);

    const after = await balances();
    expect(after.target).toBe(before.target + PRICE);
    expect(after.service).toBe(before.service - PRICE);
    await expectProxyCharged(db, organisationId, {
      network: NETWORK,
      price: PRICE,
      credits: CREDITS,
      transaction: targetTx,
    });
  });

  it('/relay: x402-fetch pays us price + fee on Solana, we pay the target exactly the price in version 2', async () => {
    target().reset();
    const before = await balances();

    const res = await payingFetch(peers, NETWORK)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET' }),
    );

    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, route: 'paid', target: target().name, network: NETWORK });
    withoutTargetHeaders(res.headers);
    const clientTx = res.headers.get('x-client-payment')!;
    expect(usdcMoves(clientTx)).toEqual({ [client()]: -RELAY_TOTAL, [service()]: RELAY_TOTAL });
    const targetTx = await checkTargetSide(2);
    expectOurReceipt(res.headers, NETWORK, service(), targetTx);
    expect(usdcMoves(targetTx)).toEqual({ [service()]: -PRICE, [target().routes.paid.payTo]: PRICE });
    expect(feePayerOf(targetTx)).toBe(peers.facilitatorV2.solanaFeePayer);

    const after = await balances();
    expect(after.client).toBe(before.client - RELAY_TOTAL);
    expect(after.target).toBe(before.target + PRICE);
    expect(after.service).toBe(before.service + RELAY_TOTAL - PRICE);
    await expectRelayDelivered(db, clientTx, { network: NETWORK, total: RELAY_TOTAL, price: PRICE });
  });

  it('/proxy/sim prices it and pays nothing', async () => {
    target().reset();
    const { key } = await createTestAccount(db, { credits: 100n });
    const before = await balances();

    const res = await t.client.post(
      '/proxy/sim',
      { api_url: target().routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(200);
    withoutTargetHeaders(res.headers);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      status: 402,
      paymentRequirements: {
        scheme: 'exact',
        network: NETWORK,
        maxAmountRequired: PRICE.toString(),
        payTo: target().routes.paid.payTo,
        extra: { feePayer: peers.facilitatorV2.solanaFeePayer },
      },
      feeBreakdown: { targetAmount: 0.012345, totalCredits: Number(CREDITS) },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    expect(await balances()).toEqual(before);
  });

  it('/relay/sim prices it (price + fee) and pays nothing', async () => {
    target().reset();
    const before = await balances();

    const res = await t.client.post('/relay/sim', { api_url: target().routes.paid.url, method: 'GET' });

    expect(res.status, res.text).toBe(200);
    withoutTargetHeaders(res.headers);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: {
        scheme: 'exact',
        network: NETWORK,
        maxAmountRequired: PRICE.toString(),
        payTo: target().routes.paid.payTo,
      },
      relayFeeBreakdown: { targetAmount: 0.012345, totalAmount: Number(RELAY_TOTAL) / 1e6 },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    expect(await balances()).toEqual(before);
  });
});
