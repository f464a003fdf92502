// Batch-settlement channels on a network whose stablecoin moves only by Permit2 (MegaETH's local
// chain, MegaUSD with 18 decimals), both directions, with deposits through the Permit2 deposit
// collector. Paying: /proxy pays the unmodified @x402/express 2.27 with @x402/evm's batch-settlement
// server scheme (its offer asks `assetTransferMethod: "permit2"`), settled by the unmodified @x402/evm
// facilitator: our wallet approves Permit2 once (recorded), the first call deposits (our balance down
// by the deposit, the channel's up, read from the chain), the next calls send vouchers only (no
// transaction of ours). Being paid: the unmodified @x402/fetch 2.27 with @x402/evm's batch-settlement
// client pays /relay by a Permit2 deposit into a channel with us (our wallet sends it through the
// Permit2 collector after simulating it), then vouchers only.
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { createTestClient, createWalletClient, getAddress, maxUint256, parseAbi, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { localTransport } from '../../devnet/evm/chain';
import { PERMIT2_ADDRESS } from '../../devnet/evm/permit2';
import { EVM_NETWORKS, startPeers, type Peers, type Target } from '../../devnet/index';
import { proxyCredits } from '../../payments/accounts/fees';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { channelClientFetch, channelOnChain, receiverChannelsEnv } from '../support/channels';
import { peersEnv } from '../support/proxy';
import { contractFetch, relayRequest } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'megaeth' as const;
const CAIP2 = 'eip155:4326';
const PRICE_MICRO = 10_000n;
/** MegaUSD has 18 decimals: a micro-USDC is 10^12 of its atomic units. */
const ATOMIC_PER_MICRO = 10n ** BigInt(EVM_NETWORKS[NETWORK].decimals - 6);
const PRICE = PRICE_MICRO * ATOMIC_PER_MICRO;
const CALLS = 5;
/** Our deposit policy as a payer: 25 times the price, one deposit for every call of this file. */
const PAYER_MULTIPLIER = 25n;
const PAYER_DEPOSIT = PAYER_MULTIPLIER * PRICE;
const PER_CALL_CREDITS = proxyCredits(PRICE_MICRO, 3).totalCredits;
/** The minimum first deposit we ask of a client: this many times the relay's total. */
const RECEIVER_MULTIPLIER = 30n;
/** ceil(10,000 x 1.03) micro-USDC, in MegaUSD: each relay call's voucher increment. */
const RELAY_TOTAL = 10_300n * ATOMIC_PER_MICRO;
const CLIENT_DEPOSIT = RELAY_TOTAL * RECEIVER_MULTIPLIER;

const erc20 = parseAbi([
  'function allowance(address owner, address spender) view returns (uint256)',
  'function approve(address spender, uint256 amount) returns (bool)',
]);

let peers: Peers;
let t: TestService;
let db: Db;
const payer = privateKeyToAccount(generatePrivateKey());

beforeAll(async () => {
  peers = await startPeers({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE_MICRO },
    targets: [
      { name: 'batch', network: NETWORK, x402Version: 2, v2Offer: { scheme: 'batch-settlement' } },
      { name: 'exact', network: NETWORK, x402Version: 2, v2Offer: { scheme: 'exact' } },
    ],
  });
  try {
    t = await startTestService(
      {
        ...peersEnv(peers),
        PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(PAYER_MULTIPLIER),
        ...receiverChannelsEnv(NETWORK, RECEIVER_MULTIPLIER),
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
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
const token = () => getAddress(EVM_NETWORKS[NETWORK].usdc);
const transactionsOf = (address: Hex) => chain().publicClient.getTransactionCount({ address });

describe('/proxy pays a batch-settlement target that asks for Permit2 deposits', () => {
  let target: Target;

  it(`pays ${CALLS} calls: one Permit2 approval and one deposit, then vouchers only`, async () => {
    target = peers.targets.batch!;
    const { key, organisationId } = await createTestAccount(db, { credits: 10_000n });
    const unpaid = await fetch(target.routes.paid.url);
    const offer = decodePaymentRequiredHeader(unpaid.headers.get('payment-required')!).accepts[0]!;
    expect(offer).toMatchObject({ scheme: 'batch-settlement', extra: { assetTransferMethod: 'permit2' } });
    const before = {
      ours: await peers.usdcBalance(NETWORK, ours()),
      payTo: await peers.usdcBalance(NETWORK, target.payTo),
      transactions: await transactionsOf(ours()),
    };

    const first = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(first.status, first.text).toBe(200);
    const channel = await db.selectFrom('payer_channels').selectAll().executeTakeFirstOrThrow();
    // Our tokens moved once, into the channel: the deposit, read from the chain.
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before.ours - PAYER_DEPOSIT);
    expect(await channelOnChain(peers, NETWORK, channel.channel_id)).toEqual({
      balance: PAYER_DEPOSIT,
      totalClaimed: 0n,
    });
    // Our wallet's one transaction: the approval of Permit2, recorded; the seller's facilitator sent the deposit.
    expect(await transactionsOf(ours())).toBe(before.transactions + 1);
    const approvals = await db.selectFrom('spending_approvals').selectAll().execute();
    expect(approvals).toHaveLength(1);
    expect(approvals[0]).toMatchObject({
      network: NETWORK,
      token: token().toLowerCase(),
      owner: ours().toLowerCase(),
      spender: PERMIT2_ADDRESS.toLowerCase(),
    });
    expect(approvals[0]!.confirmed_at).not.toBeNull();
    expect(
      await chain().publicClient.readContract({
        address: token(),
        abi: erc20,
        functionName: 'allowance',
        args: [ours(), PERMIT2_ADDRESS],
      }),
    ).toBeGreaterThanOrEqual(maxUint256 - PAYER_DEPOSIT);

    for (let call = 2; call <= CALLS; call++) {
      const res = await t.client.post(
        '/proxy',
        { api_url: target.routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': key } },
      );
      expect(res.status, res.text).toBe(200);
    }
    // Vouchers only: no transaction of ours, no token of ours moved.
    expect(await transactionsOf(ours())).toBe(before.transactions + 1);
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before.ours - PAYER_DEPOSIT);
    const vouchers = await db.selectFrom('payer_vouchers').selectAll().orderBy('id').execute();
    expect(vouchers.map((voucher) => [voucher.state, voucher.ceiling_atomic, voucher.deposit_atomic])).toEqual(
      Array.from({ length: CALLS }, (_, index) => [
        'charged',
        String(BigInt(index + 1) * PRICE),
        index === 0 ? PAYER_DEPOSIT.toString() : null,
      ]),
    );
    expect(vouchers[0]!.deposit_tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
    expect(await organisationBalance(db, organisationId)).toBe(10_000n - BigInt(CALLS) * PER_CALL_CREDITS);

    // The seller claims and settles exactly what it charged.
    await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, channel.channel_id)).toEqual({
      balance: PAYER_DEPOSIT,
      totalClaimed: BigInt(CALLS) * PRICE,
    });
    expect(await peers.usdcBalance(NETWORK, target.payTo)).toBe(before.payTo + BigInt(CALLS) * PRICE);
    expect(await db.selectFrom('spending_approvals').selectAll().execute()).toHaveLength(1);
  });
});

describe('/relay is paid by a Permit2 deposit into a channel with us', () => {
  const storage = new InMemoryClientChannelStorage();
  const target = () => peers.targets.exact!;

  const payingFetch = (sent: string[]) => channelClientFetch(peers, NETWORK, payer, storage, sent);

  const relayInit = () => relayRequest({ api_url: target().routes.paid.url, method: 'GET', network: NETWORK });
  const relay = (pay: typeof fetch) => pay(`${t.service.url}/relay`, relayInit());
  const channelRow = () => db.selectFrom('receiver_channels').selectAll().executeTakeFirst();

  it('offers batch-settlement on MegaETH asking for Permit2 deposits, our wallet receiving', async () => {
    const res = await contractFetch()(`${t.service.url}/relay`, relayInit());
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(required.accepts).toHaveLength(1);
    expect(required.accepts[0]).toMatchObject({
      scheme: 'batch-settlement',
      network: CAIP2,
      amount: RELAY_TOTAL.toString(),
      asset: token(),
      payTo: ours(),
      extra: { receiverAuthorizer: ours(), minDeposit: CLIENT_DEPOSIT.toString(), assetTransferMethod: 'permit2' },
    });
  });

  it('refuses a Permit2 deposit the chain would refuse (no approval of Permit2), and moves nothing', async () => {
    await peers.mint(NETWORK, payer.address, 1_000_000n);
    const before = await peers.usdcBalance(NETWORK, payer.address);
    const sent: string[] = [];
    const res = await relay(payingFetch(sent)).catch(() => undefined);
    expect(res?.status ?? 402).toBe(402);
    expect(sent).toHaveLength(1);
    const again = await contractFetch()(`${t.service.url}/relay`, {
      ...relayInit(),
      headers: { 'content-type': 'application/json', 'payment-signature': sent[0]! },
    });
    expect(again.status).toBe(402);
    expect(decodePaymentRequiredHeader(again.headers.get('payment-required')!).error).toBe(
      'invalid_batch_settlement_evm_deposit_simulation_failed',
    );
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(before);
    expect(await channelRow()).toBeUndefined();
  });

  it(`the first call deposits through the Permit2 collector, the next ${CALLS - 1} are vouchers only`, async () => {
    // The client's own one approval of Permit2 on MegaUSD, with gas of its own.
    const transport = localTransport(chain().rpcUrl);
    await createTestClient({ mode: 'hardhat', chain: chain().chain, transport }).setBalance({
      address: payer.address,
      value: 10n ** 18n,
    });
    const approval = await createWalletClient({ account: payer, chain: chain().chain, transport }).writeContract({
      address: token(),
      abi: erc20,
      functionName: 'approve',
      args: [PERMIT2_ADDRESS, maxUint256],
    });
    expect((await chain().publicClient.waitForTransactionReceipt({ hash: approval })).status).toBe('success');

    const payerStart = await peers.usdcBalance(NETWORK, payer.address);
    const sent: string[] = [];
    const pay = payingFetch(sent);
    const first = await relay(pay);
    expect(first.status).toBe(200);
    const deposit = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(deposit).toMatchObject({
      success: true,
      network: CAIP2,
      amount: CLIENT_DEPOSIT.toString(),
      extra: { chargedAmount: RELAY_TOTAL.toString() },
    });
    // Our wallet sent the deposit; the client's tokens moved once, into the channel.
    const receipt = await chain().publicClient.getTransactionReceipt({ hash: deposit.transaction as Hex });
    expect(receipt.status).toBe('success');
    expect(getAddress(receipt.from)).toBe(ours());
    const channelId = (deposit.extra as { channelState: { channelId: Hex } }).channelState.channelId;
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - CLIENT_DEPOSIT);
    expect(await channelOnChain(peers, NETWORK, channelId)).toEqual({ balance: CLIENT_DEPOSIT, totalClaimed: 0n });
    const firstPayload = JSON.parse(Buffer.from(sent.at(-1)!, 'base64').toString()) as {
      payload: { type: string; deposit: { authorization: Record<string, unknown> } };
    };
    expect(firstPayload.payload.type).toBe('deposit');
    expect(Object.keys(firstPayload.payload.deposit.authorization)).toEqual(['permit2Authorization']);

    for (let call = 2; call <= CALLS; call++) {
      const res = await relay(pay);
      expect(res.status).toBe(200);
      expect(decodePaymentResponseHeader(res.headers.get('payment-response')!)).toMatchObject({
        success: true,
        transaction: '',
        extra: { channelState: { chargedCumulativeAmount: (BigInt(call) * RELAY_TOTAL).toString() } },
      });
    }
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - CLIENT_DEPOSIT);
    expect(await channelOnChain(peers, NETWORK, channelId)).toEqual({ balance: CLIENT_DEPOSIT, totalClaimed: 0n });
    expect(await channelRow()).toMatchObject({ charged_cumulative: (BigInt(CALLS) * RELAY_TOTAL).toString() });
  });

  it('a credits purchase, with no exact entry on MegaETH, offers batch-settlement and is paid from the same channel', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 0n });
    // 0.1 USDC: within what the channel still holds after the relay calls (a voucher, no deposit).
    const credits = 100;
    const purchaseInit = (): RequestInit => ({
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ credits }),
    });
    const offered = await contractFetch()(`${t.service.url}/v1/credits/purchase`, purchaseInit());
    expect(offered.status).toBe(402);
    const required = decodePaymentRequiredHeader(offered.headers.get('payment-required')!);
    expect(required.accepts.map((entry) => [entry.scheme, entry.network])).toEqual([['batch-settlement', CAIP2]]);
    const price = BigInt(required.accepts[0]!.amount);

    const before = (await channelRow())!;
    const payerBefore = await peers.usdcBalance(NETWORK, payer.address);
    const paid = await payingFetch([])(`${t.service.url}/v1/credits/purchase`, purchaseInit());
    expect(paid.status, `${await paid.clone().text()} ${paid.headers.get('payment-required')}`).toBe(200);
    expect(await paid.json()).toMatchObject({ status: 'credited', credits });
    expect(decodePaymentResponseHeader(paid.headers.get('payment-response')!)).toMatchObject({
      success: true,
      transaction: '',
      extra: { chargedAmount: price.toString() },
    });
    // A voucher on the channel the relay calls opened: no tokens moved, the charge on it.
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerBefore);
    expect(await channelRow()).toMatchObject({
      channel_id: before.channel_id,
      charged_cumulative: (BigInt(before.charged_cumulative) + price).toString(),
    });
    expect(await organisationBalance(db, organisationId)).toBe(BigInt(credits));
  });
});
