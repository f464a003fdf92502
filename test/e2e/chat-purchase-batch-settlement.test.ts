// POST /llm/chat and POST /v1/credits/purchase paid through batch-settlement channels: the
// unmodified @x402/fetch 2.27 with @x402/evm's batch-settlement client scheme (in-memory client
// storage, its default deposit policy) pays them on base-sepolia. Their 402s offer batch-settlement
// beside exact for the same amount; the first call of each payer deposits (its tokens move once,
// read from the chain), the next ones send vouchers only (PAYMENT-RESPONSE transaction "", tokens
// unmoved); a chat whose backend fails is not charged and its voucher's cumulative amount pays the
// next chat; /llm/translate takes the same channel; credits are added with the charge, once per
// voucher; a stale voucher gets the corrective 402; and the worker's claim moves exactly the charged
// total of both channels to our wallet.
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  decodePaymentSignatureHeader,
} from '@x402/core/http';
import { InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { getAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { createTestAccount } from '../support/accounts';
import {
  channelClientFetch,
  chargedOf as channelCharged,
  channelOnChain as onChain,
  claimChannels,
  until,
  receiverChannelsEnv,
} from '../support/channels';
import { llmEnv, peersEnv } from '../support/proxy';
import { contractFetch } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia' as const;
const CAIP2 = 'eip155:84532';
/** LLM_PRICE_USDC 0.01: each chat's voucher increment. */
const CHAT_PRICE = 10_000n;
/** Credits bought per purchase, at 1,000 atomic units each: each purchase's voucher increment. */
const CREDITS = 25;
const PURCHASE_PRICE = BigInt(CREDITS) * 1_000n;
const MULTIPLIER = 30n;

let peers: Peers;
let llm: LocalLlm;
let t: TestService;
let db: Db;
const chatPayer = privateKeyToAccount(generatePrivateKey());
const buyer = privateKeyToAccount(generatePrivateKey());
const chatStorage = new InMemoryClientChannelStorage();
const buyerStorage = new InMemoryClientChannelStorage();

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  try {
    llm = await startLocalLlm();
    t = await startTestService(
      {
        ...peersEnv(peers),
        ...llmEnv(llm),
        ...receiverChannelsEnv(NETWORK, MULTIPLIER),
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
    await peers.mint(NETWORK, chatPayer.address, 1_000_000n);
    await peers.mint(NETWORK, buyer.address, 2_000_000n);
  } catch (error) {
    await ifStarted(llm)?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

const service = () => getAddress(peers.wallets.service.evm.address);
const payingFetch = (account: PrivateKeyAccount, storage: InMemoryClientChannelStorage, sent: string[] = []) =>
  channelClientFetch(peers, NETWORK, account, storage, sent);

const chatBody = (content: string) => JSON.stringify({ messages: [{ role: 'user', content }] });

const chat = (pay: typeof fetch, content: string, headers: Record<string, string> = {}) =>
  pay(`${t.service.url}/llm/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: chatBody(content),
  });

const purchase = (pay: typeof fetch, key: string, headers: Record<string, string> = {}) =>
  pay(`${t.service.url}/v1/credits/purchase`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers },
    body: JSON.stringify({ credits: CREDITS }),
  });

const channelOnChain = (channelId: Hex) => onChain(peers, NETWORK, channelId);
const chargedOf = (channelId: Hex) => channelCharged(db, channelId);

async function chargesOf(channelId: Hex): Promise<{ cumulative: bigint; amount: bigint; target_url: string | null }[]> {
  const rows = await db
    .selectFrom('receiver_channel_charges')
    .select(['cumulative', 'amount', 'target_url'])
    .where('channel_id', '=', channelId.toLowerCase())
    .orderBy('cumulative')
    .execute();
  return rows.map((row) => ({
    cumulative: BigInt(row.cumulative),
    amount: BigInt(row.amount),
    target_url: row.target_url,
  }));
}

const channelIdOf = (receipt: ReturnType<typeof decodePaymentResponseHeader>) =>
  (receipt.extra as { channelState: { channelId: Hex } }).channelState.channelId;

const ceilingOf = (signature: string) =>
  BigInt(
    (decodePaymentSignatureHeader(signature).payload as { voucher: { maxClaimableAmount: string } }).voucher
      .maxClaimableAmount,
  );

let chatChannel: Hex;
let buyerChannel: Hex;

describe('/llm/chat paid through a batch-settlement channel', () => {
  it('offers batch-settlement beside exact for the chat price: our wallet receives and authorizes', async () => {
    const res = await chat(contractFetch(), 'hi');
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(required.accepts.find((entry) => entry.scheme === 'batch-settlement')).toMatchObject({
      network: CAIP2,
      amount: CHAT_PRICE.toString(),
      payTo: service(),
      extra: {
        receiverAuthorizer: service(),
        withdrawDelay: 86_400,
        minDeposit: (CHAT_PRICE * MULTIPLIER).toString(),
      },
    });
    expect(required.accepts.find((entry) => entry.scheme === 'exact')).toMatchObject({
      network: CAIP2,
      amount: CHAT_PRICE.toString(),
    });
  });

  it('the first chat deposits, the next four pay by voucher: the client tokens move once, each answer is the model', async () => {
    const pay = payingFetch(chatPayer, chatStorage);
    const payerStart = await peers.usdcBalance(NETWORK, chatPayer.address);
    llm.requests.length = 0;
    const first = await chat(pay, 'first');
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ response: 'Echo: first', model: llm.model });
    const deposit = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(deposit).toMatchObject({
      success: true,
      network: CAIP2,
      payer: chatPayer.address,
      amount: (CHAT_PRICE * MULTIPLIER).toString(),
      extra: { chargedAmount: CHAT_PRICE.toString(), channelState: { chargedCumulativeAmount: CHAT_PRICE.toString() } },
    });
    expect(deposit.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    chatChannel = channelIdOf(deposit);
    const deposited = await peers.usdcBalance(NETWORK, chatPayer.address);
    expect(deposited).toBe(payerStart - CHAT_PRICE * MULTIPLIER);
    for (let call = 2; call <= 5; call++) {
      const res = await chat(pay, `call ${call}`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ response: `Echo: call ${call}`, model: llm.model });
      expect(decodePaymentResponseHeader(res.headers.get('payment-response')!)).toMatchObject({
        success: true,
        transaction: '',
        extra: {
          chargedAmount: CHAT_PRICE.toString(),
          channelState: { chargedCumulativeAmount: (BigInt(call) * CHAT_PRICE).toString() },
        },
      });
    }
    expect(llm.requests).toHaveLength(5);
    expect(await peers.usdcBalance(NETWORK, chatPayer.address)).toBe(deposited);
    expect(await channelOnChain(chatChannel)).toEqual({ balance: CHAT_PRICE * MULTIPLIER, totalClaimed: 0n });
    expect(await chargedOf(chatChannel)).toBe(5n * CHAT_PRICE);
    const charges = await chargesOf(chatChannel);
    expect(charges.map((charge) => charge.cumulative)).toEqual([1n, 2n, 3n, 4n, 5n].map((n) => n * CHAT_PRICE));
    expect(charges.every((charge) => charge.amount === CHAT_PRICE)).toBe(true);
    expect(charges.every((charge) => charge.target_url === `${t.service.url}/llm/chat`)).toBe(true);
  });

  it('a failing backend is not charged: no charge row, and the next chat pays with a voucher of the same cumulative amount', async () => {
    const sent: string[] = [];
    const pay = payingFetch(chatPayer, chatStorage, sent);
    const before = await chargesOf(chatChannel);
    const payerBefore = await peers.usdcBalance(NETWORK, chatPayer.address);
    llm.failWith = 500;
    let failed: Response;
    try {
      failed = await chat(pay, 'fail');
    } finally {
      llm.failWith = undefined;
    }
    expect(failed.status).toBe(500);
    expect(await failed.json()).toMatchObject({
      code: 'llm_failed',
      message: expect.stringContaining('nothing was charged'),
    });
    expect(failed.headers.get('payment-response')).toBeNull();
    expect(await chargesOf(chatChannel)).toEqual(before);
    expect(await chargedOf(chatChannel)).toBe(5n * CHAT_PRICE);
    const failedVoucher = sent.at(-1)!;
    expect(ceilingOf(failedVoucher)).toBe(6n * CHAT_PRICE);

    const next = await chat(pay, 'after the failure');
    expect(next.status).toBe(200);
    expect(ceilingOf(sent.at(-1)!)).toBe(ceilingOf(failedVoucher));
    expect(await chargedOf(chatChannel)).toBe(6n * CHAT_PRICE);
    expect((await chargesOf(chatChannel)).at(-1)).toMatchObject({ cumulative: 6n * CHAT_PRICE, amount: CHAT_PRICE });
    expect(await peers.usdcBalance(NETWORK, chatPayer.address)).toBe(payerBefore);
  });

  it('a stale voucher gets the corrective 402 with our state and the last voucher we hold; nothing is charged', async () => {
    const sent: string[] = [];
    const pay = payingFetch(chatPayer, chatStorage, sent);
    expect((await chat(pay, 'one more')).status).toBe(200);
    const charged = await chargedOf(chatChannel);
    const stale = await chat(contractFetch(), 'again', { 'payment-signature': sent[0]! });
    expect(stale.status).toBe(402);
    const required = decodePaymentRequiredHeader(stale.headers.get('payment-required')!);
    expect(required.error).toBe('invalid_batch_settlement_evm_cumulative_amount_mismatch');
    expect(required.accepts.find((entry) => entry.scheme === 'batch-settlement')?.extra).toMatchObject({
      channelState: { chargedCumulativeAmount: charged.toString() },
      voucherState: { signedMaxClaimable: charged.toString() },
    });
    expect(await chargedOf(chatChannel)).toBe(charged);
  });
  it('/llm/translate takes the same channel: answered, charged its price by voucher', async () => {
    const pay = payingFetch(chatPayer, chatStorage);
    const charged = await chargedOf(chatChannel);
    const res = await pay(`${t.service.url}/llm/translate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: 'good morning' }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ targetLanguage: 'es', model: llm.model });
    expect(decodePaymentResponseHeader(res.headers.get('payment-response')!)).toMatchObject({
      success: true,
      transaction: '',
      extra: {
        chargedAmount: CHAT_PRICE.toString(),
        channelState: { chargedCumulativeAmount: (charged + CHAT_PRICE).toString() },
      },
    });
    expect((await chargesOf(chatChannel)).at(-1)).toMatchObject({
      cumulative: charged + CHAT_PRICE,
      target_url: `${t.service.url}/llm/translate`,
    });
  });
});

describe('/v1/credits/purchase paid through a batch-settlement channel', () => {
  it('offers batch-settlement beside exact for the credits price', async () => {
    const { key } = await createTestAccount(db);
    const res = await purchase(contractFetch(), key);
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(required.accepts.find((entry) => entry.scheme === 'batch-settlement')).toMatchObject({
      network: CAIP2,
      amount: PURCHASE_PRICE.toString(),
      payTo: service(),
      extra: { receiverAuthorizer: service(), minDeposit: (PURCHASE_PRICE * MULTIPLIER).toString() },
    });
    expect(required.accepts.some((entry) => entry.scheme === 'exact')).toBe(true);
  });

  it('the first purchase deposits, the next two pay by voucher: each adds the credits once, with its charge', async () => {
    const { key, organisationId } = await createTestAccount(db);
    const pay = payingFetch(buyer, buyerStorage);
    const buyerStart = await peers.usdcBalance(NETWORK, buyer.address);
    const first = await purchase(pay, key);
    expect(first.status).toBe(200);
    const deposit = decodePaymentResponseHeader(first.headers.get('payment-response')!);
    expect(deposit).toMatchObject({
      success: true,
      network: CAIP2,
      amount: (PURCHASE_PRICE * MULTIPLIER).toString(),
      extra: { chargedAmount: PURCHASE_PRICE.toString() },
    });
    buyerChannel = channelIdOf(deposit);
    expect(await first.json()).toMatchObject({
      status: 'credited',
      credits: CREDITS,
      amount: PURCHASE_PRICE.toString(),
      network: NETWORK,
      payer: buyer.address,
      transaction: deposit.transaction,
      balance: CREDITS,
    });
    const deposited = await peers.usdcBalance(NETWORK, buyer.address);
    expect(deposited).toBe(buyerStart - PURCHASE_PRICE * MULTIPLIER);
    for (let call = 2; call <= 3; call++) {
      const res = await purchase(pay, key);
      expect(res.status).toBe(200);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).toMatchObject({ status: 'credited', credits: CREDITS, balance: call * CREDITS });
      expect(body.transaction).toBeUndefined();
      expect(decodePaymentResponseHeader(res.headers.get('payment-response')!)).toMatchObject({
        success: true,
        transaction: '',
        extra: {
          chargedAmount: PURCHASE_PRICE.toString(),
          channelState: { chargedCumulativeAmount: (BigInt(call) * PURCHASE_PRICE).toString() },
        },
      });
      // The record the answer names is ended: the credits were added.
      const record = await t.client.get(`/webhooks/${body.webhook_id as string}`);
      expect(record.status).toBe(200);
    }
    expect(await peers.usdcBalance(NETWORK, buyer.address)).toBe(deposited);
    const organisation = await db
      .selectFrom('organisations')
      .select('credit_balance')
      .where('id', '=', organisationId)
      .executeTakeFirstOrThrow();
    expect(organisation.credit_balance).toBe(3n * BigInt(CREDITS));
    // One ledger entry per charge, named by the charge's cumulative amount on the channel.
    const ledger = await db
      .selectFrom('credit_ledger')
      .select(['kind', 'amount_credits', 'reference'])
      .where('organisation_id', '=', organisationId)
      .orderBy('id')
      .execute();
    const charges = await chargesOf(buyerChannel);
    expect(charges.map((charge) => charge.cumulative)).toEqual([1n, 2n, 3n].map((n) => n * PURCHASE_PRICE));
    expect(ledger.map((entry) => [entry.kind, entry.amount_credits, entry.reference])).toEqual(
      charges.map((charge) => [
        'purchase',
        BigInt(CREDITS),
        `purchase:channel:${buyerChannel.toLowerCase()}:${charge.cumulative}`,
      ]),
    );
  });

  it('a stale voucher buys nothing: the corrective 402, no credit and no charge', async () => {
    const { key, organisationId } = await createTestAccount(db);
    const sent: string[] = [];
    const pay = payingFetch(buyer, buyerStorage, sent);
    expect((await purchase(pay, key)).status).toBe(200);
    const charged = await chargedOf(buyerChannel);
    const stale = await purchase(contractFetch(), key, { 'payment-signature': sent[0]! });
    expect(stale.status).toBe(402);
    expect(decodePaymentRequiredHeader(stale.headers.get('payment-required')!).error).toBe(
      'invalid_batch_settlement_evm_cumulative_amount_mismatch',
    );
    expect(await chargedOf(buyerChannel)).toBe(charged);
    const organisation = await db
      .selectFrom('organisations')
      .select('credit_balance')
      .where('id', '=', organisationId)
      .executeTakeFirstOrThrow();
    expect(organisation.credit_balance).toBe(BigInt(CREDITS));
  });
});

describe('claims of the channels chat and purchases were paid through', () => {
  it('the worker claims both channels and settles: exactly their charged total reaches our wallet', async () => {
    const chatCharged = await chargedOf(chatChannel);
    const buyerCharged = await chargedOf(buyerChannel);
    expect(chatCharged).toBe(8n * CHAT_PRICE);
    expect(buyerCharged).toBe(4n * PURCHASE_PRICE);
    const oursBefore = await peers.usdcBalance(NETWORK, service());
    await claimChannels(db);
    await until(
      async () => [await channelOnChain(chatChannel), await channelOnChain(buyerChannel)],
      ([chatState, buyerState]) => chatState!.totalClaimed === chatCharged && buyerState!.totalClaimed === buyerCharged,
      'the claim',
    );
    await until(
      () => peers.usdcBalance(NETWORK, service()),
      (balance) => balance === oursBefore + chatCharged + buyerCharged,
      'the settle',
    );
    expect(await peers.usdcBalance(NETWORK, service())).toBe(oursBefore + chatCharged + buyerCharged);
    expect(await channelOnChain(chatChannel)).toEqual({ balance: CHAT_PRICE * MULTIPLIER, totalClaimed: chatCharged });
    expect(await channelOnChain(buyerChannel)).toEqual({
      balance: PURCHASE_PRICE * MULTIPLIER,
      totalClaimed: buyerCharged,
    });
  });
});
