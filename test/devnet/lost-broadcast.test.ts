// A broadcast lost on its way to the node: our fault proxy in front of the chain's JSON-RPC endpoint
// drops the connection of an eth_sendRawTransaction, or answers it 503, before the node sees it.
// The settlement of a client's payment is then pending with a hash the node never heard of; the
// follow-up (reconcileSettlement, which the watch job runs every 2 s) sends the same signed bytes
// again, and the payment settles in seconds instead of staying open until the client's
// authorization expires. The same for a refund. When another transaction of ours took the lost
// one's nonce meanwhile (the node never counted it), the settlement is signed again with the
// pending nonce. Every amount is read from the chain: once.
import { createWalletClient, http, keccak256, type Hash } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultKind, type FaultProxy, type FaultRequest } from '../../devnet/faults';
import { startPeers, type Peers } from '../../devnet/index';
import { systemClock } from '../../payments/basics/clock';
import { findRelayTransaction } from '../../payments/incoming/store';
import { reconcileRefund, refundClientPayment } from '../../payments/incoming/refund';
import { reconcileSettlement, settleClientPayment } from '../../payments/incoming/settle';
import { createChains, type Chains } from '../../payments/chains/index';
import { followUpRefund } from '../../payments/operations/relay/finish';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { recordedRelayPayment, settlingOn, type Settling } from '../support/chains';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 10_300n;
/** The watch job reads a settlement that is not confirmed yet again after this long. */
const RECHECK_MS = 2_000;

let peers: Peers;
let rpcProxy: FaultProxy;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let direct: Settling;
/**
 * The fault every broadcast meets until it is set back to 'pass': the node stays unreachable for
 * the whole settlement (our transport sends a request once more when a reused connection drops).
 */
let broadcastFault: FaultKind = 'pass';
const broadcasts: Array<{ raw: Hash; fault: FaultKind }> = [];

function chooseFault(request: FaultRequest): FaultKind {
  const call = JSON.parse(request.body.toString('utf8')) as { method?: string; params?: unknown[] };
  if (call.method !== 'eth_sendRawTransaction') return 'pass';
  const fault = broadcastFault;
  broadcasts.push({ raw: call.params?.[0] as Hash, fault });
  return fault;
}

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  rpcProxy = await startFaultProxy({ upstream: peers.rpcUrls[NETWORK]!, choose: chooseFault });
  chains = await createChains(
    {
      networks: [{ name: NETWORK, rpcUrl: rpcProxy.url, usdc: NETWORK_TABLE[NETWORK].usdc }],
      evmPrivateKey: peers.wallets.service.evm.privateKey,
      solanaPrivateKey: undefined,
    },
    { rpcTimeoutMs: 2_000 },
  );
  database = await createTestDatabase();
  db = database.handle.db;
  ({ direct } = settlingOn(chains, peers.facilitator.url));
  direct = { ...direct, paymentBounds: { ...direct.paymentBounds, confirmationTimeoutMs: 1_000 } };
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(chains)?.close();
  await ifStarted(rpcProxy)?.close();
  await ifStarted(peers)?.stop();
});

const client = () => peers.wallets.client.evm.address;
const service = () => peers.wallets.service.evm.address;
const usdc = (owner: string) => peers.usdcBalance(NETWORK, owner);
const knownToChain = (hash: string) =>
  peers.evmChains[NETWORK]!.publicClient.getTransaction({ hash: hash as Hash }).then(
    () => true,
    () => false,
  );

const recordedPayment = () => recordedRelayPayment(peers, db, direct, NETWORK, PRICE);

/** Every broadcast met the fault but the last, which passed; all of them the same signed bytes. */
function expectLostThenLanded(sent: typeof broadcasts, fault: FaultKind): void {
  expect(sent.length).toBeGreaterThanOrEqual(2);
  expect(sent.map((broadcast) => broadcast.fault)).toEqual([...sent.slice(0, -1).map(() => fault), 'pass']);
  expect(new Set(sent.map((broadcast) => broadcast.raw)).size).toBe(1);
}

/** Runs `follow` every RECHECK_MS, as the watch job does, until `done`; answers the time it took. */
async function followUntil(follow: () => Promise<boolean>, timeoutMs = 30_000): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await follow()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error('the follow-up never concluded');
    await new Promise((resolve) => setTimeout(resolve, RECHECK_MS));
  }
}

describe.each(['drop', 'error5xx'] as const)('a broadcast lost to %s', (fault) => {
  it('the settlement is sent again with the same signed bytes and settles in seconds, once', async () => {
    const before = { client: await usdc(client()), service: await usdc(service()) };
    const row = await recordedPayment();
    broadcasts.length = 0;
    broadcastFault = fault;
    const settlement = await settleClientPayment(db, row.id, direct);
    broadcastFault = 'pass';
    expect(settlement).toMatchObject({ kind: 'pending' });
    const pending = (await findRelayTransaction(db, row.id))!;
    expect(pending.state).toBe('settling');
    expect(pending.client_raw_tx).not.toBeNull();
    expect(keccak256(pending.client_raw_tx as Hash)).toBe(pending.client_tx_hash);
    expect(await knownToChain(pending.client_tx_hash!)).toBe(false);
    expect(await usdc(client())).toBe(before.client);

    const tookMs = await followUntil(async () => (await reconcileSettlement(db, row.id, direct)).kind === 'settled');
    // Printed, not asserted: followUntil's bound is the test's (speed belongs in the bench).
    console.log(`${fault}: settled ${tookMs} ms after the lost broadcast, by the follow-up's rebroadcast`);
    const settled = (await findRelayTransaction(db, row.id))!;
    expect(settled).toMatchObject({ state: 'settled', client_tx_hash: pending.client_tx_hash });
    // The lost broadcasts and the one that landed are the same bytes: one transaction.
    expectLostThenLanded(broadcasts, fault);
    expect(await usdc(client())).toBe(before.client - PRICE);
    expect(await usdc(service())).toBe(before.service + PRICE);
  });

  it('a refund whose broadcast was lost is sent again and pays the client back exactly once', async () => {
    const row = await recordedPayment();
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });
    const before = await usdc(client());
    broadcasts.length = 0;
    broadcastFault = fault;
    expect(await refundClientPayment(db, row.id, direct)).toMatchObject({ kind: 'pending' });
    broadcastFault = 'pass';
    expect(await usdc(client())).toBe(before);
    const deps = { ...direct, clock: systemClock };
    const tookMs = await followUntil(async () => {
      const refund = await db
        .selectFrom('refunds')
        .selectAll()
        .where('relay_transaction_id', '=', row.id)
        .executeTakeFirstOrThrow();
      return (await reconcileRefund(db, refund.id, deps)).kind === 'refunded';
    });
    console.log(`${fault}: refund confirmed ${tookMs} ms after its lost broadcast`);
    const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row.id).execute();
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ status: 'confirmed' });
    expectLostThenLanded(broadcasts, fault);
    expect(broadcasts[0]!.raw).toBe(refunds[0]!.raw_tx);
    expect(await usdc(client())).toBe(before + PRICE);
  });
});

/** A transaction of the service's key, mined: it reads the same pending nonce as a lost broadcast (the node never counted that one). */
async function takeOurNextNonce(): Promise<void> {
  const account = privateKeyToAccount(peers.wallets.service.evm.privateKey);
  const wallet = createWalletClient({
    account,
    chain: peers.evmChains[NETWORK]!.chain,
    transport: http(rpcProxy.url),
  });
  await peers.evmChains[NETWORK]!.publicClient.waitForTransactionReceipt({
    hash: await wallet.sendTransaction({ to: account.address, value: 0n }),
  });
}

describe('a lost broadcast whose nonce another transaction of ours took meanwhile', () => {
  it('is signed again with the pending nonce by the follow-up (it has the submission queue) and settles once', async () => {
    const before = { client: await usdc(client()), service: await usdc(service()) };
    const row = await recordedPayment();
    broadcasts.length = 0;
    broadcastFault = 'drop';
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'pending' });
    broadcastFault = 'pass';
    const lost = (await findRelayTransaction(db, row.id))!;
    await takeOurNextNonce();

    const jobDeps = { ...direct, clock: systemClock };
    const tookMs = await followUntil(async () => (await reconcileSettlement(db, row.id, jobDeps)).kind === 'settled');
    console.log(`settled ${tookMs} ms after the lost broadcast, signed again with a new nonce`);
    const settled = (await findRelayTransaction(db, row.id))!;
    expect(settled.state).toBe('settled');
    expect(settled.client_tx_hash).not.toBe(lost.client_tx_hash);
    expect(await knownToChain(lost.client_tx_hash!)).toBe(false);
    expect(keccak256(settled.client_raw_tx as Hash)).toBe(settled.client_tx_hash);
    expect(await usdc(client())).toBe(before.client - PRICE);
    expect(await usdc(service())).toBe(before.service + PRICE);
  });
  it('a refund: the refund job fails it at once (it can never be mined) and its next attempt pays the client back once', async () => {
    const row = await recordedRelayPayment(peers, db, direct, NETWORK, PRICE, { mode: 'relay' });
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });
    const before = await usdc(client());
    broadcastFault = 'drop';
    expect(await refundClientPayment(db, row.id, direct)).toMatchObject({ kind: 'pending' });
    broadcastFault = 'pass';
    const refundsOf = () =>
      db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row.id).orderBy('id').execute();
    const [lost] = await refundsOf();
    await takeOurNextNonce();

    const jobDeps = { ...direct, db, clock: systemClock };
    const first = await followUpRefund(row.id, jobDeps);
    expect(first, first.details).toMatchObject({ kind: 'look_again' });
    expect(first.details).toMatch(/refund attempt 1 failed: .*can never be mined/);
    expect((await refundsOf())[0]).toMatchObject({ id: lost!.id, status: 'failed' });
    await followUntil(async () => (await followUpRefund(row.id, jobDeps)).kind === 'done');

    const refunds = await refundsOf();
    expect(refunds.map((refund) => refund.status)).toEqual(['failed', 'confirmed']);
    expect(refunds[1]!.tx_hash).not.toBe(lost!.tx_hash);
    expect(await knownToChain(lost!.tx_hash!)).toBe(false);
    expect((await findRelayTransaction(db, row.id))!.state).toBe('refunded');
    expect(await usdc(client())).toBe(before + PRICE);
  });
});
