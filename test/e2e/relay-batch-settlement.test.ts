// /relay paid through a batch-settlement channel: the unmodified @x402/fetch 2.27 with @x402/evm's
// batch-settlement client scheme (in-memory client storage, its default deposit policy) pays our
// /relay in front of an exact target on base-sepolia. Our 402 offers batch-settlement beside exact
// (receiver and receiver authorizer our wallet); the first call deposits (the client's tokens move
// once, read from the chain), the next 19 send vouchers only (PAYMENT-RESPONSE transaction "",
// extra.chargedAmount); a call the target fails is not charged; a client that lost its channel
// state gets a corrective 402 (cumulative amount mismatch, with our state and its last voucher) and
// recovers; two service instances on one database given the same voucher at once commit its
// cumulative amount once; the worker claims the channel in one claimWithSignature and settles,
// every leg read from the chain; a payer who starts a withdrawal is claimed long before its delay
// ends; and the client's cooperative refund gets its unused balance back at once.
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import pino from 'pino';
import { createTestClient, createWalletClient, getAddress, http, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers } from '../../devnet/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { loadConfig } from '../../payments/basics/config';
import { startService, type Service } from '../../server/service';
import {
  channelClientFetch,
  chargedOf as channelCharged,
  channelOnChain as onChain,
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
/** ceil(10,000 x 1.03): each call's voucher increment. */
const TOTAL = 10_300n;
const MULTIPLIER = 30n;
const DEPOSIT = TOTAL * MULTIPLIER;

let peers: Peers;
let t: TestService;
let second: Service | undefined;
let db: Db;
const payerKey = generatePrivateKey();
const payer = privateKeyToAccount(payerKey);
let storage = new InMemoryClientChannelStorage();

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, error: PRICE } });
  try {
    t = await startTestService(
      {
        ...peersEnv(peers),
        ...receiverChannelsEnv(NETWORK, MULTIPLIER),
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
  await second?.stop();
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const service = () => getAddress(peers.wallets.service.evm.address);
const chain = () => peers.evmChains[NETWORK]!;

const payingFetch = (sent: string[] = []) => channelClientFetch(peers, NETWORK, payer, storage, sent);

const relay = (pay: typeof fetch, url: string, base = t.service.url) =>
  pay(`${base}/relay`, relayRequest({ api_url: url, method: 'GET', network: NETWORK }));

const channelOnChain = (channelId: Hex) => onChain(peers, NETWORK, channelId);
const chargedOf = (channelId: Hex) => channelCharged(db, channelId);
const claimJob = (force: boolean) => claimChannels(db, force);

let channelId: Hex;

describe('/relay paid through a batch-settlement channel', () => {
  it('offers batch-settlement beside exact: our wallet receives and authorizes, with our withdraw delay and minimum deposit', async () => {
    const res = await contractFetch()(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET', network: NETWORK }),
    );
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    const channel = required.accepts.find((entry) => entry.scheme === 'batch-settlement');
    expect(channel).toMatchObject({
      network: CAIP2,
      amount: TOTAL.toString(),
      payTo: service(),
      extra: { receiverAuthorizer: service(), withdrawDelay: 86_400, minDeposit: DEPOSIT.toString() },
    });
    expect(required.accepts.some((entry) => entry.scheme === 'exact')).toBe(true);
  });

  it('20 calls from one channel move the client tokens once, at the deposit; the target is paid each time', async () => {
    const pay = payingFetch();
    const payerStart = await peers.usdcBalance(NETWORK, payer.address);
    const targetStart = await peers.usdcBalance(NETWORK, target().routes.paid.payTo);
    const first = await relay(pay, target().routes.paid.url);
    expect(first.status).toBe(200);
    const deposit = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(deposit).toMatchObject({
      success: true,
      network: CAIP2,
      amount: DEPOSIT.toString(),
      extra: { chargedAmount: TOTAL.toString(), channelState: { chargedCumulativeAmount: TOTAL.toString() } },
    });
    expect(deposit.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    channelId = (deposit.extra as { channelState: { channelId: Hex } }).channelState.channelId;
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - DEPOSIT);
    for (let call = 2; call <= 20; call++) {
      const res = await relay(pay, target().routes.paid.url);
      expect(res.status).toBe(200);
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(receipt).toMatchObject({
        success: true,
        transaction: '',
        extra: {
          chargedAmount: TOTAL.toString(),
          channelState: { chargedCumulativeAmount: (BigInt(call) * TOTAL).toString() },
        },
      });
    }
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerStart - DEPOSIT);
    expect(await peers.usdcBalance(NETWORK, target().routes.paid.payTo)).toBe(targetStart + 20n * PRICE);
    expect(await channelOnChain(channelId)).toEqual({ balance: DEPOSIT, totalClaimed: 0n });
    expect(await chargedOf(channelId)).toBe(20n * TOTAL);
  });

  it('a target that fails is not charged: the next call goes on from the same total', async () => {
    const pay = payingFetch();
    const before = await chargedOf(channelId);
    const failed = await relay(pay, target().routes.error.url);
    expect(failed.status).toBe(502);
    expect(failed.headers.get('payment-response')).toBeNull();
    expect(await chargedOf(channelId)).toBe(before);
    const next = await relay(pay, target().routes.paid.url);
    expect(next.status).toBe(200);
    expect(await chargedOf(channelId)).toBe(before + TOTAL);
  });

  it('a client that lost its channel state gets a corrective 402 and recovers from our last voucher', async () => {
    storage = new InMemoryClientChannelStorage();
    const sent: string[] = [];
    const pay = payingFetch(sent);
    const before = await chargedOf(channelId);
    const payerBefore = await peers.usdcBalance(NETWORK, payer.address);
    // Seen on the wire: the corrective 402 itself, before the client's retry.
    const seen: { status: number; error?: string }[] = [];
    const watching: typeof fetch = async (input, init) => {
      const res = await pay(input, init);
      seen.push({ status: res.status });
      return res;
    };
    const res = await relay(watching, target().routes.paid.url);
    expect(res.status).toBe(200);
    expect(sent.length).toBeGreaterThanOrEqual(2);
    expect(await chargedOf(channelId)).toBe(before + TOTAL);
    // No second deposit: the client's tokens did not move.
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerBefore);
    const corrected = await contractFetch()(`${t.service.url}/relay`, {
      ...relayRequest({ api_url: target().routes.paid.url, method: 'GET', network: NETWORK }),
      headers: { 'content-type': 'application/json', 'payment-signature': sent[0]! },
    });
    // The first (stale) payment again: refused with the specification's code and our state.
    expect(corrected.status).toBe(402);
    const required = decodePaymentRequiredHeader(corrected.headers.get('payment-required')!);
    expect(required.error).toBe('invalid_batch_settlement_evm_cumulative_amount_mismatch');
    const entry = required.accepts.find((accept) => accept.scheme === 'batch-settlement')!;
    expect(entry.extra).toMatchObject({
      channelState: { chargedCumulativeAmount: (before + TOTAL).toString() },
      voucherState: { signedMaxClaimable: (before + TOTAL).toString() },
    });
  });

  it('two instances on one database given the same voucher at once commit its cumulative amount once', async () => {
    second = await startService(
      loadConfig({
        ...peersEnv(peers),
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'silent',
        RUN_WORKER: 'false',
        CHANNEL_RECEIVER_NETWORKS: NETWORK,
        CHANNEL_RECEIVER_MIN_DEPOSIT_MULTIPLIER: String(MULTIPLIER),
        DATABASE_URL: t.database.url,
      }),
      { logger: pino({ level: 'silent' }), resolver: tableResolver() },
    );
    // A voucher for the next amount, signed by the client and captured on its way (then answered 200).
    const sent: string[] = [];
    const res = await relay(payingFetch(sent), target().routes.paid.url);
    expect(res.status).toBe(200);
    const before = await chargedOf(channelId);
    // Its next voucher, signed by the client and held back on its way (the call answered 599 to it).
    const nextSent: string[] = [];
    const client = new x402Client();
    client.register(
      'eip155:*',
      new BatchSettlementEvmScheme(toClientEvmSigner(payer, chain().publicClient), { storage }),
    );
    const holding = wrapFetchWithPayment(async (input, init) => {
      const request = new Request(input, init);
      const signature = request.headers.get('payment-signature');
      if (signature === null) return contractFetch()(request);
      nextSent.push(signature);
      return new Response('held', { status: 599 });
    }, client);
    await relay(holding, target().routes.paid.url);
    expect(nextSent).toHaveLength(1);
    const send = (base: string) =>
      contractFetch()(`${base}/relay`, {
        ...relayRequest({ api_url: target().routes.paid.url, method: 'GET', network: NETWORK }),
        headers: { 'content-type': 'application/json', 'payment-signature': nextSent[0]! },
      });
    const answers = await Promise.all([send(t.service.url), send(second.url)]);
    const statuses = answers.map((answer) => answer.status).sort();
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    expect(statuses.filter((status) => status === 402)).toHaveLength(1);
    expect(await chargedOf(channelId)).toBe(before + TOTAL);
    const charges = await db
      .selectFrom('receiver_channel_charges')
      .select(['cumulative'])
      .where('channel_id', '=', channelId.toLowerCase())
      .execute();
    const cumulatives = charges.map((row) => row.cumulative);
    expect(new Set(cumulatives).size).toBe(cumulatives.length);
    expect(cumulatives).toContain((before + TOTAL).toString());
  });

  it('the worker claims the channel in one transaction and settles: exactly the charged total reaches our wallet', async () => {
    const charged = await chargedOf(channelId);
    const oursBefore = await peers.usdcBalance(NETWORK, service());
    const payerBefore = await peers.usdcBalance(NETWORK, payer.address);
    await claimJob(true);
    await until(
      () => channelOnChain(channelId),
      (state) => state.totalClaimed === charged,
      'the claim',
    );
    await until(
      () => peers.usdcBalance(NETWORK, service()),
      (balance) => balance === oursBefore + charged,
      'the settle',
    );
    expect(await channelOnChain(channelId)).toEqual({ balance: DEPOSIT, totalClaimed: charged });
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerBefore);
    // One claim transaction for the channel, then one settle: both recorded before their broadcast, confirmed after.
    const transactions = await until(
      () => db.selectFrom('receiver_channel_claims').selectAll().orderBy('id').execute(),
      (rows) => rows.length === 2 && rows.every((row) => row.state !== 'sent'),
      'the claim and settle records',
    );
    expect(transactions.map((row) => [row.kind, row.state, row.channels])).toEqual([
      ['claim', 'confirmed', 1],
      ['settle', 'confirmed', 0],
    ]);
  });

  it('a payer who starts a withdrawal is claimed before its delay ends', async () => {
    const pay = payingFetch();
    for (let call = 0; call < 2; call++) expect((await relay(pay, target().routes.paid.url)).status).toBe(200);
    const charged = await chargedOf(channelId);
    expect((await channelOnChain(channelId)).totalClaimed).toBeLessThan(charged);
    const row = await db
      .selectFrom('receiver_channels')
      .select('config')
      .where('channel_id', '=', channelId.toLowerCase())
      .executeTakeFirstOrThrow();
    const config = row.config as Parameters<typeof chainConfig>[0];
    // The payer starts withdrawing what it thinks unclaimed (it pays the gas itself).
    const rpcUrl = peers.rpcUrls[NETWORK]!;
    await createTestClient({ mode: 'hardhat', transport: http(rpcUrl) }).setBalance({
      address: payer.address,
      value: 10n ** 18n,
    });
    const wallet = createWalletClient({ account: payer, chain: chain().publicClient.chain!, transport: http(rpcUrl) });
    const hash = await wallet.writeContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'initiateWithdraw',
      args: [chainConfig(config), DEPOSIT - (await channelOnChain(channelId)).totalClaimed],
    });
    await chain().publicClient.waitForTransactionReceipt({ hash });
    const started = await chain().publicClient.getBlock();
    // Not forced: the pending withdrawal makes the claim due.
    await claimJob(false);
    await until(
      () => channelOnChain(channelId),
      (state) => state.totalClaimed === charged,
      'the claim before the withdrawal',
    );
    const now = await chain().publicClient.getBlock();
    expect(now.timestamp - started.timestamp).toBeLessThan(86_400n);
  });
  it("a cooperative refund gives the payer its channel's unused balance back at once, our charges kept", async () => {
    const charged = await chargedOf(channelId);
    const before = await channelOnChain(channelId);
    const payerBefore = await peers.usdcBalance(NETWORK, payer.address);
    const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(payer, chain().publicClient), { storage });
    // The client's refund asks its URL by GET; /relay is a POST naming the target in its body.
    const asRelay: typeof fetch = (_input, init) =>
      contractFetch()(`${t.service.url}/relay`, {
        method: 'POST',
        headers: { ...Object.fromEntries(new Headers(init?.headers).entries()), 'content-type': 'application/json' },
        body: JSON.stringify({ api_url: target().routes.paid.url, method: 'GET', network: NETWORK }),
      });
    const settled = await scheme.refund(`${t.service.url}/relay`, { fetch: asRelay });
    expect(settled.success).toBe(true);
    expect(settled.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    const refunded = before.balance - charged;
    expect(await peers.usdcBalance(NETWORK, payer.address)).toBe(payerBefore + refunded);
    expect(await channelOnChain(channelId)).toEqual({ balance: charged, totalClaimed: before.totalClaimed });
  });
});

function chainConfig(config: {
  payer: Hex;
  payerAuthorizer: Hex;
  receiver: Hex;
  receiverAuthorizer: Hex;
  token: Hex;
  withdrawDelay: number;
  salt: Hex;
}) {
  return config;
}
