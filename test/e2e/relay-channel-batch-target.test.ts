// /relay from a channel client to a batch-settlement target: the unmodified @x402/fetch 2.27 with
// @x402/evm's batch-settlement client pays our /relay through its channel with us, and we pay the
// target (the unmodified @x402/express 2.27 asking batch-settlement, its @x402/evm facilitator)
// through our own channel with it. Neither side waits for a block after the deposits: the client's
// tokens move once (its deposit), ours once (our deposit), and the calls in between send no
// transaction from either wallet. The client's channel is charged what the seller charged plus the
// fee (less than the price when the seller charges less), nothing when the target fails; the daily
// relay limits count what it was charged; every leg is read from the chain after the seller's claim
// and settle and after ours.
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { getAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers, type Target } from '../../devnet/index';
import {
  channelClientFetch,
  chargedOf as channelCharged,
  channelOnChain,
  claimChannels,
  until,
  receiverChannelsEnv,
} from '../support/channels';
import { peersEnv } from '../support/proxy';
import { contractFetch, relayRequest } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia' as const;
const CAIP2 = 'eip155:84532';
const PRICE = 10_000n;
/** ceil(10,000 x 1.03): the most a call costs the client, its voucher's increment. */
const TOTAL = 10_300n;
/** What the second seller charges of its price, and the client's charge for it: ceil(4,000 x 1.03). */
const HALF_CHARGE = 4_000n;
const HALF_TOTAL = 4_120n;
const CLIENT_MULTIPLIER = 20n;
const CLIENT_DEPOSIT = TOTAL * CLIENT_MULTIPLIER;
/** Our deposit into each seller's channel: PAYER_CHANNEL_DEPOSIT_MULTIPLIER x the price. */
const OUR_DEPOSIT = 20n * PRICE;
const CALLS = 5;

let peers: Peers;
let t: TestService;
let db: Db;
let seller: Target;
let halfSeller: Target;
const payer = privateKeyToAccount(generatePrivateKey());
const storage = new InMemoryClientChannelStorage();

beforeAll(async () => {
  peers = await startPeers({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE, error: PRICE },
    targets: [
      { name: 'seller', network: NETWORK, x402Version: 2, v2Offer: { scheme: 'batch-settlement' } },
      {
        name: 'half-seller',
        network: NETWORK,
        x402Version: 2,
        v2Offer: { scheme: 'batch-settlement', uptoChargeMicroUsdc: HALF_CHARGE },
      },
    ],
  });
  try {
    seller = peers.targets.seller!;
    halfSeller = peers.targets['half-seller']!;
    t = await startTestService(
      {
        ...peersEnv(peers),
        ...receiverChannelsEnv(NETWORK, CLIENT_MULTIPLIER),
        PAYER_CHANNEL_DEPOSIT_MULTIPLIER: '20',
        RELAY_DAILY_PER_WALLET_USD: '1',
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
    await peers.mint(NETWORK, payer.address, 1_000_000n);
  } catch (error) {
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const chain = () => peers.evmChains[NETWORK]!;
const ours = () => getAddress(peers.wallets.service.evm.address);

const payingFetch = () => channelClientFetch(peers, NETWORK, payer, storage);

const relay = (pay: typeof fetch, url: string) =>
  pay(`${t.service.url}/relay`, relayRequest({ api_url: url, method: 'GET', network: NETWORK }));

const chargedOf = (channelId: Hex) => channelCharged(db, channelId);

/** Transactions each wallet has sent: a call that sends none waited for no block. */
async function nonces() {
  const count = (address: Hex) => chain().publicClient.getTransactionCount({ address });
  return { client: await count(payer.address), ours: await count(ours()) };
}

interface ChannelReceipt {
  chargedAmount: string;
  channelState: { channelId: Hex; chargedCumulativeAmount: string };
}

let clientChannel: Hex;
let start: { client: bigint; ours: bigint; sellers: bigint };

describe('/relay from a channel client to a batch-settlement target', () => {
  it('offers batch-settlement for the target, priced at its price plus the fee', async () => {
    const res = await relay(contractFetch(), seller.routes.paid.url);
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(required.accepts.find((entry) => entry.scheme === 'batch-settlement')).toMatchObject({
      network: CAIP2,
      amount: TOTAL.toString(),
      payTo: ours(),
      extra: { receiverAuthorizer: ours(), minDeposit: CLIENT_DEPOSIT.toString() },
    });
  });

  it(`${CALLS} calls: one deposit from each wallet, then vouchers both ways with no transaction sent`, async () => {
    start = {
      client: await peers.usdcBalance(NETWORK, payer.address),
      ours: await peers.usdcBalance(NETWORK, ours()),
      sellers: await peers.usdcBalance(NETWORK, seller.routes.paid.payTo),
    };
    const pay = payingFetch();
    const first = await relay(pay, seller.routes.paid.url);
    expect(first.status, await first.clone().text()).toBe(200);
    const deposit = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(deposit).toMatchObject({ success: true, network: CAIP2, amount: CLIENT_DEPOSIT.toString() });
    expect(deposit.extra).toMatchObject({ chargedAmount: TOTAL.toString() });
    clientChannel = (deposit.extra as unknown as ChannelReceipt).channelState.channelId;
    // Our payment to the seller: a voucher (with our deposit), no settlement transaction.
    expect(decodePaymentResponseHeader(first.headers.get('x-payment-response')!)).toMatchObject({
      success: true,
      transaction: '',
    });
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(start.client - CLIENT_DEPOSIT);
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(start.ours - OUR_DEPOSIT);

    const sent = await nonces();
    seller.reset();
    for (let call = 2; call <= CALLS; call++) {
      const res = await relay(pay, seller.routes.paid.url);
      expect(res.status).toBe(200);
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(receipt).toMatchObject({ success: true, transaction: '' });
      expect(receipt.extra).toMatchObject({
        chargedAmount: TOTAL.toString(),
        channelState: { chargedCumulativeAmount: (BigInt(call) * TOTAL).toString() },
      });
    }
    expect(await nonces()).toEqual(sent);
    // The seller's price was asked by the first call alone (its 402 kept): each call since reached it
    // once, with our voucher (both the client's 402 and its paid request were priced without it).
    expect(seller.requests.map((request) => request.payment !== null)).toEqual(
      Array.from({ length: CALLS - 1 }, () => true),
    );
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(start.client - CLIENT_DEPOSIT);
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(start.ours - OUR_DEPOSIT);
    expect(await chargedOf(clientChannel)).toBe(BigInt(CALLS) * TOTAL);
    const vouchers = await db.selectFrom('payer_vouchers').select(['state', 'charged_atomic']).execute();
    expect(vouchers).toEqual(
      Array.from({ length: CALLS }, () => ({ state: 'charged', charged_atomic: PRICE.toString() })),
    );
  });

  it('a seller that charges less than its price: the client is charged what it charged plus the fee', async () => {
    const pay = payingFetch();
    const before = await chargedOf(clientChannel);
    const res = await relay(pay, halfSeller.routes.paid.url);
    expect(res.status, await res.clone().text()).toBe(200);
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    expect(receipt.extra).toMatchObject({
      chargedAmount: HALF_TOTAL.toString(),
      channelState: { chargedCumulativeAmount: (before + HALF_TOTAL).toString() },
    });
    expect(await chargedOf(clientChannel)).toBe(before + HALF_TOTAL);
    // The next voucher goes on from the smaller total.
    const next = await relay(pay, seller.routes.paid.url);
    expect(next.status).toBe(200);
    expect(await chargedOf(clientChannel)).toBe(before + HALF_TOTAL + TOTAL);
  });

  it('a target that fails charges nothing on either channel', async () => {
    const pay = payingFetch();
    const before = await chargedOf(clientChannel);
    const sent = await nonces();
    const failed = await relay(pay, seller.routes.error.url);
    expect(failed.status).toBe(502);
    expect(failed.headers.get('payment-response')).toBeNull();
    expect(await chargedOf(clientChannel)).toBe(before);
    const [last] = await db.selectFrom('payer_vouchers').select('state').orderBy('id', 'desc').limit(1).execute();
    expect(last).toEqual({ state: 'not_charged' });
    expect(await nonces()).toEqual(sent);
    const next = await relay(pay, seller.routes.paid.url);
    expect(next.status).toBe(200);
    expect(await chargedOf(clientChannel)).toBe(before + TOTAL);
  });

  it('the daily relay limits count what channel payments were charged, and refuse one past the limit with nothing charged', async () => {
    const charged = await chargedOf(clientChannel);
    const limits = await t.client.get(`/relay/limits/${payer.address}`);
    expect(limits.status, limits.text).toBe(200);
    // Failed calls and the smaller charge were taken back: the counter is what was charged.
    expect(limits.body).toMatchObject({ testnet: { wallet_limits: { today_spent: Number(charged) / 1e6 } } });
    // Earlier payments of this wallet today bring it just under its 1 USD limit.
    const day = new Date().toISOString().slice(0, 10);
    await db
      .updateTable('daily_spend')
      .set({ spent_micro_usdc: 1_000_000n - TOTAL + 1n })
      .where('scope', '=', 'relay_wallet')
      .where('scope_id', '=', payer.address)
      .where('day', '=', day)
      .execute();
    const pay = payingFetch();
    const refused = await relay(pay, seller.routes.paid.url);
    expect(refused.status, await refused.clone().text()).toBe(429);
    expect(refused.headers.get('payment-response')).toBeNull();
    expect(await chargedOf(clientChannel)).toBe(charged);
    // Nothing stays held: the channel serves the next payment once the limit allows it.
    await db
      .updateTable('daily_spend')
      .set({ spent_micro_usdc: charged })
      .where('scope', '=', 'relay_wallet')
      .where('scope_id', '=', payer.address)
      .where('day', '=', day)
      .execute();
    const next = await relay(pay, seller.routes.paid.url);
    expect(next.status).toBe(200);
    expect(await chargedOf(clientChannel)).toBe(charged + TOTAL);
  });

  it('after the sellers claim and settle, and we do: every leg on chain is exact', async () => {
    const sellerCalls = BigInt(CALLS) + 3n;
    // The local sellers are paid to one address.
    expect(halfSeller.routes.paid.payTo).toBe(seller.routes.paid.payTo);
    const clientCharged = await chargedOf(clientChannel);
    expect(clientCharged).toBe(sellerCalls * TOTAL + HALF_TOTAL);
    await seller.batchSettlement[0]!.manager.claimAndSettle();
    await halfSeller.batchSettlement[0]!.manager.claimAndSettle();
    await claimChannels(db);
    await until(
      () => channelOnChain(peers, NETWORK, clientChannel),
      (state) => state.totalClaimed === clientCharged,
      'our claim',
    );
    const oursAfter = start.ours - 2n * OUR_DEPOSIT + clientCharged;
    await until(
      () => peers.usdcBalance(NETWORK, ours()),
      (balance) => balance === oursAfter,
      'our settle',
    );
    expect({
      client: await peers.usdcBalance(NETWORK, payer.address),
      ours: await peers.usdcBalance(NETWORK, ours()),
      sellers: await peers.usdcBalance(NETWORK, seller.routes.paid.payTo),
    }).toEqual({
      client: start.client - CLIENT_DEPOSIT,
      ours: oursAfter,
      sellers: start.sellers + sellerCalls * PRICE + HALF_CHARGE,
    });
    expect(await channelOnChain(peers, NETWORK, clientChannel)).toEqual({
      balance: CLIENT_DEPOSIT,
      totalClaimed: clientCharged,
    });
  });
});
