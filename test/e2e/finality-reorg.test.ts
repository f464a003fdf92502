// Settled is not final: a reorg on the local base-sepolia chain (evm_snapshot before a paid call,
// evm_revert after it) drops what the call settled. The finality watches send the dropped
// transactions again (the client's authorization, our authorization to the target, our refund),
// each lands once, and every watch ends final at FINALITY_DEPTH_BASE_SEPOLIA blocks; where a
// dropped payment can no longer land (the payer's balance is gone), the watch ends lost with the
// amount at risk, prs_payments_lost_to_reorg_total grows, and a /proxy charge's credits come back.
// Balances are read on chain: nothing is paid twice. Every answer is checked against the document.
import { encodeFunctionData, getAddress, parseAbi, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import type { Db } from '../../db/index';
import { authorizationOf, transferWithAuthorizationData } from '../../payments/chains/evm/verify';
import { NETWORK_TABLE } from '../../payments/networkTable';
import type { PaymentPayload } from '../../payments/x402/types';
import { createTestAccount } from '../support/accounts';
import { growth } from '../support/metrics';
import { pollWebhook, startProxyService } from '../support/proxy';
import { paidRelayRow, payingFetch, relayLegBalances, relayRequest } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 10_000n;
/** ceil(10,000 x 1.03) */
const TOTAL = 10_300n;
const DEPTH = 3;
const WINDOW_SECONDS = 10;
const USDC = getAddress(NETWORK_TABLE[NETWORK].usdc);

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, error: PRICE } });
  t = await startProxyService(peers, {
    FINALITY_DEPTH_BASE_SEPOLIA: String(DEPTH),
    RELAY_PAYMENT_WINDOW_SECONDS: String(WINDOW_SECONDS),
  });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const chain = () => peers.evmChains[NETWORK]!;
/** Hardhat's own methods (evm_snapshot, evm_revert, evm_mine, hardhat_setBalance), which viem's types do not list. */
const rpc = (method: string, params: unknown[] = []): Promise<unknown> =>
  (chain().publicClient.request as (args: { method: string; params: unknown[] }) => Promise<unknown>)({
    method,
    params,
  });
const snapshot = async () => String(await rpc('evm_snapshot'));
async function revert(id: string) {
  expect(await rpc('evm_revert', [id])).toBe(true);
}
const payTo = () => getAddress(peers.targets[NETWORK]!.routes.paid.payTo);
const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;

async function scrape(): Promise<string> {
  const response = await t.client.get('/metrics');
  expect(response.status).toBe(200);
  return response.text;
}

function watchesOf(where: { relay?: bigint; proxy?: bigint }) {
  let query = db.selectFrom('finality_watches').selectAll().orderBy('id');
  if (where.relay !== undefined) query = query.where('relay_transaction_id', '=', where.relay);
  if (where.proxy !== undefined) query = query.where('proxy_payment_id', '=', where.proxy);
  return query.execute();
}

/** Until every watch of the subject is final or lost, the chain producing a block each round as a live chain does. */
async function settledWatches(where: { relay?: bigint; proxy?: bigint }, count: number) {
  const deadline = Date.now() + 40_000;
  for (;;) {
    const watches = await watchesOf(where);
    if ((watches.length >= count && watches.every((watch) => watch.finality !== 'pending')) || Date.now() > deadline)
      return watches;
    await rpc('evm_mine');
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

/** A transfer that must be mined once: its receipt succeeded on the chain as it is now. */
async function expectMined(hash: string) {
  const receipt = await chain().publicClient.getTransactionReceipt({ hash: hash as Hex });
  expect(receipt.status).toBe('success');
}

/** A wallet of the local chain with gas to spend (its native balance set), for transactions the test sends. */
async function fundedWallet(privateKey: Hex = generatePrivateKey()) {
  const wallet = peers.evmWalletClient(NETWORK, privateKey);
  await rpc('hardhat_setBalance', [wallet.account!.address, '0x8ac7230489e80000']);
  return wallet;
}

/** Someone else lands an authorization on the new fork, as another sender would. */
async function landElsewhere(payment: unknown) {
  const wallet = await fundedWallet();
  const hash = await wallet.sendTransaction({
    account: wallet.account!,
    chain: wallet.chain,
    to: USDC,
    data: transferWithAuthorizationData(authorizationOf(payment as PaymentPayload)),
  });
  await expectMined(hash);
  return hash;
}

const paidRelay = () => paidRelayRow(peers, t, NETWORK);

/** Every watched transaction is mined on the chain as it is now, and each leg moved its amount once. */
async function expectEachLegPaidOnce(
  watches: { tx_hash: string }[],
  before: Awaited<ReturnType<typeof relayLegBalances>>,
) {
  for (const watch of watches) await expectMined(watch.tx_hash);
  expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual({
    client: before.client - TOTAL,
    service: before.service + TOTAL - PRICE,
    target: before.target + PRICE,
  });
}

describe('a reorg drops what a paid /relay call settled', () => {
  it('the client settlement only: our wallet sends the client authorization again; it lands once, both legs final', async () => {
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const fork = await snapshot();
    const row = await paidRelay();
    const pending = await watchesOf({ relay: row.id });
    expect(pending.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'pending'],
      ['target_payment', 'pending'],
    ]);
    await revert(fork);
    expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual(before);
    // The new fork holds our payment to the target (mined by another sender), not the client's settlement.
    const targetOnFork = await landElsewhere(row.target_payment_payload);

    const watches = await settledWatches({ relay: row.id }, 2);
    expect(watches.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'final'],
      ['target_payment', 'final'],
    ]);
    const [clientLeg, targetLeg] = watches;
    // Sent once more by our wallet (with the same nonce and fees it can be the very transaction again).
    expect(clientLeg!.resends).toBe(1);
    expect(targetLeg!.resends).toBe(0);
    expect(targetLeg!.tx_hash).toBe(targetOnFork);
    await expectEachLegPaidOnce(watches, before);
  }, 60_000);

  it('the target payment only: our authorization to the target is sent again and lands once', async () => {
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const fork = await snapshot();
    const row = await paidRelay();
    await revert(fork);
    const clientOnFork = await landElsewhere(row.payment_payload);

    const watches = await settledWatches({ relay: row.id }, 2);
    expect(watches.map((watch) => [watch.leg, watch.finality, watch.resends])).toEqual([
      ['client_settlement', 'final', 0],
      ['target_payment', 'final', 1],
    ]);
    expect(watches[0]!.tx_hash).toBe(clientOnFork);
    expect(watches[1]!.tx_hash).not.toBe(row.target_tx_hash);
    await expectEachLegPaidOnce(watches, before);
  }, 60_000);

  it('both legs: each is sent again and lands once', async () => {
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const fork = await snapshot();
    const row = await paidRelay();
    await revert(fork);

    const watches = await settledWatches({ relay: row.id }, 2);
    expect(watches.map((watch) => [watch.leg, watch.finality, watch.resends])).toEqual([
      ['client_settlement', 'final', 1],
      ['target_payment', 'final', 1],
    ]);
    await expectEachLegPaidOnce(watches, before);
  }, 60_000);

  it('the client settlement, when the client moved its balance away on the new fork: lost, alerted, the amount at risk recorded', async () => {
    const elsewhere = privateKeyToAccount(generatePrivateKey()).address;
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const metrics = await scrape();
    const fork = await snapshot();
    const row = await paidRelay();
    await revert(fork);
    await landElsewhere(row.target_payment_payload);
    // On the new fork the client spends what it had authorized before our settlement could land again.
    const wallet = await fundedWallet(peers.wallets.client.evm.privateKey);
    const away = await wallet.sendTransaction({
      account: wallet.account!,
      chain: wallet.chain,
      to: USDC,
      data: encodeFunctionData({
        abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']),
        functionName: 'transfer',
        args: [elsewhere, before.client],
      }),
    });
    await expectMined(away);

    const watches = await settledWatches({ relay: row.id }, 2);
    expect(watches.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'lost'],
      ['target_payment', 'final'],
    ]);
    expect(watches[0]).toMatchObject({ amount_micro_usdc: TOTAL, resends: 0 });
    expect(watches[0]!.details).toMatch(/^balance_gone: /);
    expect(
      growth(
        metrics,
        await scrape(),
      )('prs_payments_lost_to_reorg_total{leg="client_settlement",network="base-sepolia"}'),
    ).toBe(1);
    // The target was paid once; the client's payment never landed: the service is out PRICE.
    expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual({
      client: 0n,
      service: before.service - PRICE,
      target: before.target + PRICE,
    });
    // The client's USDC is whole again for the tests after this one.
    await peers.mint(NETWORK, client(), before.client);
  }, 60_000);
});

describe('a reorg drops a refund', () => {
  it('the refund is sent again and lands once; its record shows finality pending, then final', async () => {
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const response = await payingFetch(peers, NETWORK)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: peers.targets[NETWORK]!.routes.error.url, method: 'GET' }),
    );
    expect(response.status).toBe(502);
    const { webhook_id: webhookId } = (await response.json()) as { webhook_id: string };
    // The client's settlement stays on every fork; the refund comes after this point.
    const fork = await snapshot();
    await new Promise((resolve) => setTimeout(resolve, (WINDOW_SECONDS + 1) * 1000));
    await chain().mineUntil(BigInt(Math.floor(Date.now() / 1000)));
    const refunded = await pollWebhook(t, webhookId, 30_000);
    expect(refunded.status).toBe(200);
    expect(refunded.body).toMatchObject({ status: 'refund_confirmed', finality: 'pending' });
    const refundTx = refunded.body.txHash as string;
    expect(await peers.usdcBalance(NETWORK, client())).toBe(before.client);
    await revert(fork);
    expect(await peers.usdcBalance(NETWORK, client())).toBe(before.client - TOTAL);

    const watches = await settledWatches({ relay: BigInt(refunded.body.relayTxId as number) }, 2);
    expect(watches.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'final'],
      ['refund', 'final'],
    ]);
    // The same signed refund, sent again: same hash, mined once.
    expect(watches[1]).toMatchObject({ tx_hash: refundTx, resends: 1 });
    await expectMined(refundTx);
    const record = await t.client.get(`/webhooks/${webhookId}`);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', finality: 'final', txHash: refundTx });
    expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual(before);
  }, 90_000);
});

describe('a reorg drops a /proxy payment', () => {
  async function paidProxy(key: string) {
    const response = await t.client.post(
      '/proxy',
      { api_url: peers.targets[NETWORK]!.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(response.status).toBe(200);
    return db.selectFrom('proxy_payments').selectAll().orderBy('id', 'desc').executeTakeFirstOrThrow();
  }

  async function chargeEntry(reference: string) {
    return db
      .selectFrom('credit_ledger')
      .select(['kind', 'amount_credits', 'finality'])
      .where('reference', '=', reference)
      .where('kind', 'in', ['charge', 'refund'])
      .orderBy('id')
      .execute();
  }

  it('our payment is sent again and lands once; the ledger says the charge is final', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const before = await relayLegBalances(peers, NETWORK, payTo());
    const fork = await snapshot();
    const payment = await paidProxy(account.key);
    expect(payment.state).toBe('charged');
    expect(await chargeEntry(payment.reference)).toEqual([
      { kind: 'charge', amount_credits: payment.credits, finality: 'pending' },
    ]);
    await revert(fork);

    const [watch] = await settledWatches({ proxy: payment.id }, 1);
    expect(watch).toMatchObject({ leg: 'target_payment', finality: 'final', resends: 1 });
    await expectMined(watch!.tx_hash);
    expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual({
      ...before,
      service: before.service - PRICE,
      target: before.target + PRICE,
    });
    expect(await chargeEntry(payment.reference)).toEqual([
      { kind: 'charge', amount_credits: payment.credits, finality: 'final' },
    ]);
  }, 60_000);

  it('when our wallet can no longer pay it on the new fork: lost, alerted, and the credits come back', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const balanceBefore = await db
      .selectFrom('organisations')
      .select('credit_balance')
      .where('id', '=', account.organisationId)
      .executeTakeFirstOrThrow();
    const metrics = await scrape();
    const fork = await snapshot();
    const payment = await paidProxy(account.key);
    await revert(fork);
    // Our wallet's USDC leaves on the new fork before the payment can land again.
    const ours = await peers.usdcBalance(NETWORK, service());
    const wallet = peers.evmWalletClient(NETWORK, peers.wallets.service.evm.privateKey);
    const away = await wallet.sendTransaction({
      account: wallet.account!,
      chain: wallet.chain,
      to: USDC,
      data: encodeFunctionData({
        abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']),
        functionName: 'transfer',
        args: [client(), ours],
      }),
    });
    await expectMined(away);

    const [watch] = await settledWatches({ proxy: payment.id }, 1);
    expect(watch).toMatchObject({ leg: 'target_payment', finality: 'lost', amount_micro_usdc: PRICE });
    expect(watch!.details).toMatch(/^balance_gone: /);
    expect(
      growth(metrics, await scrape())('prs_payments_lost_to_reorg_total{leg="target_payment",network="base-sepolia"}'),
    ).toBe(1);
    expect(await chargeEntry(payment.reference)).toEqual([
      { kind: 'charge', amount_credits: payment.credits, finality: 'lost' },
      { kind: 'refund', amount_credits: payment.credits, finality: null },
    ]);
    const balanceAfter = await db
      .selectFrom('organisations')
      .select('credit_balance')
      .where('id', '=', account.organisationId)
      .executeTakeFirstOrThrow();
    expect(balanceAfter.credit_balance).toBe(balanceBefore.credit_balance);
    await peers.mint(NETWORK, service(), ours);
  }, 60_000);
});
