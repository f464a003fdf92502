// Settled is not final: a reorg on the local base-sepolia chain (evm_snapshot before a paid call,
// evm_revert after it) drops what the call settled. The finality watches send the dropped
// transactions again (the client's authorization, our authorization to the target, our refund),
// each lands once at FINALITY_DEPTH_BASE_SEPOLIA blocks, and a watch ends final once its block is
// that deep and its authorization can no longer be sent again (a reorg deeper than the depth could
// still drop it until then); where a dropped payment can no longer land (the payer's balance is
// gone), the watch ends lost with the amount at risk, prs_payments_lost_to_reorg_total grows, and a
// /proxy charge's credits come back. Balances are read on chain: nothing is paid twice. Every
// answer is checked against the document. Waits are on the state expected, with bounds generous for
// a loaded machine; the authorizations we sign live WINDOW_SECONDS, long enough there for a dropped
// one to be sent again in time.
import { encodeFunctionData, getAddress, parseAbi, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import type { Db } from '../../db/index';
import { authorizationOf, transferWithAuthorizationData } from '../../payments/chains/evm/verify';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
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
/** How long an authorization we sign (to a relay's or a /proxy call's target) stays valid. */
const WINDOW_SECONDS = 30;
/** How long a test waits for the watches to end: the window, and room for a loaded machine. */
const SETTLE_BOUND_MS = (WINDOW_SECONDS + 150) * 1000;
const TEST_TIMEOUT_MS = SETTLE_BOUND_MS + 120_000;
const USDC = getAddress(NETWORK_TABLE[NETWORK].usdc);

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, error: PRICE } });
  t = await startProxyService(peers, {
    FINALITY_DEPTH_BASE_SEPOLIA: String(DEPTH),
    RELAY_PAYMENT_WINDOW_SECONDS: String(WINDOW_SECONDS),
    PROXY_PAYMENT_WINDOW_SECONDS: String(WINDOW_SECONDS),
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
/**
 * Back to the snapshot, and a block at the wall clock's time at once: the local chain's first block
 * after an evm_revert otherwise runs its clock ahead by the snapshot's age, and authorizations of
 * later calls would expire early on chain.
 */
async function revert(id: string) {
  expect(await rpc('evm_revert', [id])).toBe(true);
  await rpc('evm_mine', [Math.floor(Date.now() / 1000)]);
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

type Watch = Awaited<ReturnType<typeof watchesOf>>[number];

/**
 * Where a watch stands: final or lost; `landed` when its transaction is at the depth and only the
 * authorization's expiry keeps it pending (a client's authorization lives five minutes, longer than
 * a test waits); else pending.
 */
function standing(watch: Watch): 'final' | 'lost' | 'landed' | 'pending' {
  if (watch.finality !== 'pending') return watch.finality;
  return /blocks deep or more; final once its authorization expires/.test(watch.details ?? '') ? 'landed' : 'pending';
}

/**
 * A block at the wall clock's time, as a live chain produces them. Without a timestamp, the local
 * chain gives each block mined after an evm_revert a second more than the one before, and a test
 * mining every 300 ms would run its clock ahead and expire the next test's authorizations.
 */
async function mine() {
  const latest = await chain().publicClient.getBlock({ blockTag: 'latest' });
  await rpc('evm_mine', [Math.max(Math.floor(Date.now() / 1000), Number(latest.timestamp))]);
}

/**
 * Until every watch of the subject is final or lost (or, with `landed`, at least landed; or as
 * `done` says), the chain producing a block each round as a live chain does; within SETTLE_BOUND_MS.
 */
async function settledWatches(
  where: { relay?: bigint; proxy?: bigint },
  count: number,
  {
    landed = false,
    done = (watch: Watch) => standing(watch) !== 'pending' && (landed || standing(watch) !== 'landed'),
  } = {},
) {
  const deadline = Date.now() + SETTLE_BOUND_MS;
  for (;;) {
    const watches = await watchesOf(where);
    if ((watches.length >= count && watches.every(done)) || Date.now() > deadline) return watches;
    await mine();
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

/** Each watch as [leg, standing, resends]: `landed` for one on chain at its depth, final or not yet. */
const legs = (watches: Watch[]) =>
  watches.map((watch) => [watch.leg, standing(watch) === 'final' ? 'landed' : standing(watch), watch.resends]);

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
  it(
    'the client settlement only: our wallet sends the client authorization again; it lands once, both legs on chain',
    async () => {
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

      const watches = await settledWatches({ relay: row.id }, 2, { landed: true });
      // Sent once more by our wallet (with the same nonce and fees it can be the very transaction again).
      expect(legs(watches)).toEqual([
        ['client_settlement', 'landed', 1],
        ['target_payment', 'landed', 0],
      ]);
      expect(watches[1]!.tx_hash).toBe(targetOnFork);
      await expectEachLegPaidOnce(watches, before);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'the target payment only: our authorization to the target is sent again and lands once',
    async () => {
      const before = await relayLegBalances(peers, NETWORK, payTo());
      const fork = await snapshot();
      const row = await paidRelay();
      await revert(fork);
      const clientOnFork = await landElsewhere(row.payment_payload);

      const watches = await settledWatches({ relay: row.id }, 2, { landed: true });
      expect(legs(watches)).toEqual([
        ['client_settlement', 'landed', 0],
        ['target_payment', 'landed', 1],
      ]);
      expect(watches[0]!.tx_hash).toBe(clientOnFork);
      expect(watches[1]!.tx_hash).not.toBe(row.target_tx_hash);
      await expectEachLegPaidOnce(watches, before);
      // Our authorization to the target lives WINDOW_SECONDS: its watch is final once it expired.
      const targetFinal = await settledWatches({ relay: row.id }, 2, {
        done: (watch) => watch.leg === 'client_settlement' || standing(watch) === 'final',
      });
      expect(targetFinal.map(standing)).toEqual(['landed', 'final']);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'both legs: each is sent again and lands once',
    async () => {
      const before = await relayLegBalances(peers, NETWORK, payTo());
      const fork = await snapshot();
      const row = await paidRelay();
      await revert(fork);

      const watches = await settledWatches({ relay: row.id }, 2, { landed: true });
      expect(legs(watches)).toEqual([
        ['client_settlement', 'landed', 1],
        ['target_payment', 'landed', 1],
      ]);
      await expectEachLegPaidOnce(watches, before);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'the client settlement, when the client moved its balance away on the new fork: lost, alerted, the amount at risk recorded',
    async () => {
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

      const watches = await settledWatches({ relay: row.id }, 2, { landed: true });
      expect(legs(watches).map(([leg, standing]) => [leg, standing])).toEqual([
        ['client_settlement', 'lost'],
        ['target_payment', 'landed'],
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
    },
    TEST_TIMEOUT_MS,
  );
});

describe('a reorg drops a refund', () => {
  it(
    'the refund is sent again and lands once; its record shows finality pending, the refund final',
    async () => {
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
      const refunded = await pollWebhook(t, webhookId, 90_000);
      expect(refunded.status).toBe(200);
      expect(refunded.body).toMatchObject({ status: 'refund_confirmed', finality: 'pending' });
      const refundTx = refunded.body.txHash as string;
      expect(await peers.usdcBalance(NETWORK, client())).toBe(before.client);
      await revert(fork);
      expect(await peers.usdcBalance(NETWORK, client())).toBe(before.client - TOTAL);

      const relayTxId = BigInt(refunded.body.relayTxId as number);
      const watches = await settledWatches({ relay: relayTxId }, 2, { landed: true });
      // The client's settlement is at its depth; its authorization (five minutes) keeps it pending.
      expect(watches.map(standing)).toEqual(['landed', 'final']);
      expect(watches.map((watch) => watch.leg)).toEqual(['client_settlement', 'refund']);
      // The same signed refund, sent again: same hash, mined once.
      expect(watches[1]).toMatchObject({ tx_hash: refundTx, resends: 1 });
      await expectMined(refundTx);
      const record = await t.client.get(`/webhooks/${webhookId}`);
      expect(record.body).toMatchObject({ status: 'refund_confirmed', finality: 'pending', txHash: refundTx });
      expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual(before);
    },
    TEST_TIMEOUT_MS,
  );
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

  it(
    'our payment is sent again and lands once; the ledger says the charge is final',
    async () => {
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
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a reorg deeper than the depth, after its watch saw the payment that deep: sent again while its authorization lasts, or lost with the credits back, within the bound',
    async () => {
      const account = await createTestAccount(db, { credits: 1_000n });
      const credits = () =>
        db
          .selectFrom('organisations')
          .select('credit_balance')
          .where('id', '=', account.organisationId)
          .executeTakeFirstOrThrow();
      const creditsBefore = await credits();
      const before = await relayLegBalances(peers, NETWORK, payTo());
      const fork = await snapshot();
      const payment = await paidProxy(account.key);
      // The chain goes on producing blocks until the watch has looked at the payment DEPTH blocks deep.
      const deadline = Date.now() + SETTLE_BOUND_MS;
      let [seen] = await watchesOf({ proxy: payment.id });
      while (!(seen && standing(seen) !== 'pending') && Date.now() < deadline) {
        await mine();
        await new Promise((resolve) => setTimeout(resolve, 300));
        [seen] = await watchesOf({ proxy: payment.id });
      }
      expect(seen!.block_number).not.toBeNull();
      // The reorg drops it, three blocks and more deep; the authorization still has most of its window.
      await revert(fork);
      expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual(before);

      const [watch] = await settledWatches({ proxy: payment.id }, 1);
      if (watch!.finality === 'final') {
        // Sent again, mined once, the target paid once, the charge final.
        expect(watch!.resends).toBeGreaterThanOrEqual(1);
        await expectMined(watch!.tx_hash);
        expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual({
          ...before,
          service: before.service - PRICE,
          target: before.target + PRICE,
        });
        expect(await chargeEntry(payment.reference)).toEqual([
          { kind: 'charge', amount_credits: payment.credits, finality: 'final' },
        ]);
        expect(await credits()).toEqual({ credit_balance: creditsBefore.credit_balance - payment.credits });
      } else {
        // Too late to send again: lost, the target unpaid and the credits back.
        expect(watch).toMatchObject({ finality: 'lost', amount_micro_usdc: PRICE });
        expect(await relayLegBalances(peers, NETWORK, payTo())).toEqual(before);
        expect(await chargeEntry(payment.reference)).toEqual([
          { kind: 'charge', amount_credits: payment.credits, finality: 'lost' },
          { kind: 'refund', amount_credits: payment.credits, finality: null },
        ]);
        expect(await credits()).toEqual(creditsBefore);
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'when our wallet can no longer pay it on the new fork: lost, alerted, and the credits come back',
    async () => {
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
        growth(
          metrics,
          await scrape(),
        )('prs_payments_lost_to_reorg_total{leg="target_payment",network="base-sepolia"}'),
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
    },
    TEST_TIMEOUT_MS,
  );
});
