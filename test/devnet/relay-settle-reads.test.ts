// Settling a payment verified a moment ago in the same request (/relay) through the facilitator:
// the chain is not read again before the facilitator settles it, and the receipt that shows the
// payment is read once. A payment settled later (a job) reads the chain again first.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers } from '../../devnet/index';
import { findRelayTransaction } from '../../payments/incoming/store';
import { settleClientPayment } from '../../payments/incoming/settle';
import { createChains, type Chains } from '../../payments/chains/index';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { recordedRelayPayment, settlingOn, type Settling } from '../support/chains';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 10_300n;

let peers: Peers;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let viaFacilitator: Settling;
/** Every JSON-RPC method our chains sent, in order. */
const sent: string[] = [];

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  chains = await createChains(
    {
      networks: [{ name: NETWORK, rpcUrl: peers.rpcUrls[NETWORK]!, usdc: NETWORK_TABLE[NETWORK].usdc }],
      evmPrivateKey: peers.wallets.service.evm.privateKey,
      solanaPrivateKey: undefined,
    },
    { onRpc: (_network, method) => sent.push(method) },
  );
  database = await createTestDatabase();
  db = database.handle.db;
  ({ viaFacilitator } = settlingOn(chains, peers.facilitator.url));
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(chains)?.close();
  await ifStarted(peers)?.stop();
});

const recordedPayment = (validForSeconds?: number) =>
  recordedRelayPayment(peers, db, viaFacilitator, NETWORK, PRICE, { validForSeconds });

describe('settling through the facilitator', () => {
  it('a payment verified just now: no read of the chain before the facilitator, one receipt after it', async () => {
    const before = await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address);
    const row = await recordedPayment();
    sent.length = 0;
    const outcome = await settleClientPayment(db, row.id, viaFacilitator, { verifiedJustNow: true });
    expect(outcome).toEqual({ kind: 'settled', txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    expect(sent.filter((method) => method === 'eth_call' || method === 'eth_getCode')).toEqual([]);
    expect(sent.filter((method) => method === 'eth_getTransactionReceipt')).toHaveLength(1);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settled' });
    expect(await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address)).toBe(before - PRICE);
  });

  it('a payment settled later reads the chain again first (nonce, balance, dry run)', async () => {
    const row = await recordedPayment();
    sent.length = 0;
    expect(await settleClientPayment(db, row.id, viaFacilitator)).toMatchObject({ kind: 'settled' });
    expect(sent.filter((method) => method === 'eth_call')).toHaveLength(3);
  });

  it('a payment verified just now but too close to its expiry is refused before the facilitator', async () => {
    const row = await recordedPayment(viaFacilitator.paymentBounds.settleMarginSeconds - 1);
    sent.length = 0;
    const outcome = await settleClientPayment(db, row.id, viaFacilitator, { verifiedJustNow: true });
    expect(outcome).toMatchObject({ kind: 'failed', reason: 'expired' });
    expect(sent).toEqual([]);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settle_failed' });
  });
});
