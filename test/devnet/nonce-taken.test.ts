// Another sender of our key takes the nonce between our read of it and our broadcast (another
// process on the same wallet outside the submission lock, an operator's wallet app). Our fault
// proxy sits in front of the chain's JSON-RPC endpoint and, before it passes on a broadcast, sends
// a transaction of the service's key straight to the chain and waits for it to be mined: the
// broadcast then meets "nonce too low". The settlement of a client's payment and a refund must
// still land, exactly once: signed again with the pending nonce read anew, the refused hash
// replaced on the row (it can never be mined), the money moved once.
import { createWalletClient, http, keccak256, type Hash } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy, type FaultRequest } from '../../devnet/faults';
import { startPeers, type Peers } from '../../devnet/index';
import { findRelayTransaction } from '../../payments/incoming/store';
import { refundClientPayment } from '../../payments/incoming/refund';
import { settleClientPayment } from '../../payments/incoming/settle';
import { MAX_NONCE_RETRIES, nonceRefusalOf } from '../../payments/chains/evm/submit';
import { createChains, type Chains } from '../../payments/chains/index';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { recordedRelayPayment, settlingOn, type Settling } from '../support/chains';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 10_300n;

let peers: Peers;
let rpcProxy: FaultProxy;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let direct: Settling;
/** How many of the next broadcasts meet a nonce taken just before them. */
let takeNext = 0;
const broadcasts: Hash[] = [];
const interlopers: Hash[] = [];

async function takeTheNonce(request: FaultRequest): Promise<void> {
  const call = JSON.parse(request.body.toString('utf8')) as { method?: string; params?: unknown[] };
  if (call.method !== 'eth_sendRawTransaction') return;
  broadcasts.push(call.params?.[0] as Hash);
  if (takeNext === 0) return;
  takeNext -= 1;
  const account = privateKeyToAccount(peers.wallets.service.evm.privateKey);
  const wallet = createWalletClient({
    account,
    chain: peers.evmChains[NETWORK]!.chain,
    transport: http(peers.rpcUrls[NETWORK]),
  });
  const hash = await wallet.sendTransaction({ to: account.address, value: 0n });
  await peers.evmChains[NETWORK]!.publicClient.waitForTransactionReceipt({ hash });
  interlopers.push(hash);
}

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  rpcProxy = await startFaultProxy({ upstream: peers.rpcUrls[NETWORK]!, beforeForward: takeTheNonce });
  chains = await createChains({
    networks: [{ name: NETWORK, rpcUrl: rpcProxy.url, usdc: NETWORK_TABLE[NETWORK].usdc }],
    evmPrivateKey: peers.wallets.service.evm.privateKey,
    solanaPrivateKey: undefined,
  });
  database = await createTestDatabase();
  db = database.handle.db;
  ({ direct } = settlingOn(chains, peers.facilitator.url));
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(chains)?.close();
  await ifStarted(rpcProxy)?.close();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;
const usdc = (owner: string) => peers.usdcBalance(NETWORK, owner);
const minedHash = async (hash: string) =>
  (await peers.evmChains[NETWORK]!.publicClient.getTransactionReceipt({ hash: hash as Hash })).status;
const unknownToChain = (hash: Hash) =>
  peers.evmChains[NETWORK]!.publicClient.getTransaction({ hash }).then(
    () => false,
    () => true,
  );

const recordedPayment = () => recordedRelayPayment(peers, db, direct, NETWORK, PRICE);

describe('a broadcast whose nonce another sender of our key took', () => {
  it('the settlement is signed again with the pending nonce and lands once; the refused hashes are replaced', async () => {
    const before = { client: await usdc(client()), service: await usdc(service()) };
    const row = await recordedPayment();
    broadcasts.length = 0;
    interlopers.length = 0;
    takeNext = 2;
    const settlement = await settleClientPayment(db, row.id, direct);
    expect(settlement).toMatchObject({ kind: 'settled' });
    // Two broadcasts refused (their nonces taken), the third accepted.
    expect(interlopers).toHaveLength(2);
    expect(broadcasts).toHaveLength(3);
    const settled = (await findRelayTransaction(db, row.id))!;
    expect(settled.state).toBe('settled');
    if (settlement.kind !== 'settled') return;
    expect(settled.client_tx_hash).toBe(settlement.txHash);
    expect(await minedHash(settlement.txHash)).toBe('success');
    expect(await usdc(client())).toBe(before.client - PRICE);
    expect(await usdc(service())).toBe(before.service + PRICE);
    // Neither refused transaction reached the chain: nothing can mine them any more.
    const refused = broadcasts.slice(0, 2).map((raw) => keccak256(raw));
    expect(keccak256(broadcasts[2]!)).toBe(settlement.txHash);
    for (const hash of refused) expect(await unknownToChain(hash)).toBe(true);
  });

  it('a refund whose nonce is taken is sent again and pays the client back exactly once', async () => {
    const row = await recordedPayment();
    const settled = await settleClientPayment(db, row.id, direct);
    expect(settled).toMatchObject({ kind: 'settled' });
    const before = await usdc(client());
    takeNext = 1;
    const refund = await refundClientPayment(db, row.id, direct);
    expect(refund).toMatchObject({ kind: 'refunded' });
    expect(await usdc(client())).toBe(before + PRICE);
    const rows = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row.id).execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'confirmed' });
    expect(await minedHash(rows[0]!.tx_hash!)).toBe('success');
  });

  it(`gives up after ${MAX_NONCE_RETRIES} new nonces, keeping the last hash for the chain to decide`, async () => {
    const row = await recordedPayment();
    const before = await usdc(client());
    broadcasts.length = 0;
    takeNext = MAX_NONCE_RETRIES + 1;
    const settlement = await settleClientPayment(db, row.id, direct);
    expect(settlement).toMatchObject({ kind: 'pending' });
    expect(broadcasts).toHaveLength(MAX_NONCE_RETRIES + 1);
    expect(await usdc(client())).toBe(before);
    takeNext = 0;
  });
});

describe('nonce refusals as nodes word them', () => {
  it.each([
    ['Nonce too low. Expected nonce to be 7 but got 6.', 'nonce_taken'],
    ['nonce too low: next nonce 7, tx nonce 6', 'nonce_taken'],
    ['replacement transaction underpriced', 'nonce_taken'],
    ['already known', 'already_known'],
    ['Known transaction: 0xabc', 'already_known'],
    ['insufficient funds for gas * price + value', undefined],
  ])('%s', (message, refusal) => {
    expect(nonceRefusalOf(new Error(message))).toBe(refusal);
  });
});
