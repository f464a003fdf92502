// Paying targets that price by x402 `upto`, served by unmodified @x402/express 2.27 and settled by
// @x402/evm's facilitator through x402UptoPermit2Proxy: on Polygon Amoy (USDC, 6 decimals) and on
// MegaETH (MegaUSD, 18 decimals, Permit2 only), one target settling less than its maximum and one
// settling all of it. Every money leg is read from the chain (our wallet, the target's payTo, the
// client) and from the credits ledger: /proxy holds the credits of the maximum plus the fee and
// charges what the target settled plus the fee on it, releasing the rest (also when only the watch
// job can find the settlement); /proxy/sim and /relay/sim show the maximum and the rule; /relay
// with an exact client takes the maximum plus the fee and refunds, on the client's own network, the
// unused part and the fee on it.
import { decodePaymentSignatureHeader } from '@x402/core/http';
import { getAddress, parseAbi, parseEventLogs, type Address, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import type { EvmNetworkName, Peers, Target } from '../../devnet/index';
import { EVM_NETWORKS } from '../../devnet/index';
import { organisationBalance } from '../../payments/credits';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { createTestAccount } from '../support/accounts';
import { paidCallAfter } from '../support/paid-target';
import { ledgerSums, peersEnv, pollWebhook } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import { startPeers } from '../../devnet/index';
import { startTestService, type TestService } from '../support/service';
import { tableResolver } from '../support/resolver';
import { ifStarted } from '../support/teardown';

const UPTO_PROXY: Address = '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002';
/** The targets' price: the maximum we authorize, in micro-USDC. */
const MAXIMUM = 20_000n;
/** What the "less" targets settle of it. */
const USED = 7_500n;
/** ceil(20,000 x 1.03 / 1000): the credits held for the maximum plus the fee. */
const RESERVED = 21n;
/** ceil(7,500 x 1.03 / 1000): the credits of what was used plus the fee on it. */
const USED_CREDITS = 8n;

/** ceil(20,000 x 1.03): what a /relay client pays us for the maximum, with an exact payment. */
const RELAY_MAX_TOTAL = 20_600n;
/** ceil(7,500 x 1.03): what it pays in the end when the target settled 7,500; the rest (12,875) is refunded. */
const RELAY_USED_TOTAL = 7_725n;

/** Each target network, and the network of the same class a /relay client pays us on. */
const CASES: { network: EvmNetworkName; clientNetwork: EvmNetworkName }[] = [
  { network: 'polygon-amoy', clientNetwork: 'base-sepolia' },
  { network: 'megaeth', clientNetwork: 'base' },
];
/** The two kinds of upto target: one settling less than its maximum, one settling all of it. */
const KINDS = [
  { kind: 'less', settles: USED, credits: USED_CREDITS, relayCharged: RELAY_USED_TOTAL },
  { kind: 'max', settles: MAXIMUM, credits: RESERVED, relayCharged: RELAY_MAX_TOTAL },
] as const;

const atomic = (network: EvmNetworkName, micro: bigint) => micro * 10n ** BigInt(EVM_NETWORKS[network].decimals - 6);
const targetName = (kind: string, network: EvmNetworkName) => `upto-${kind}-${network}`;

let peers: Peers;
let t: TestService;
let db: Db;
/** A fault proxy in front of the "less" target on Polygon Amoy: it breaks the answer to our paid call. */
let breaking: FaultProxy | undefined;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base', 'base-sepolia', 'megaeth', 'polygon-amoy'],
    pricesMicroUsdc: { paid: MAXIMUM, paidEcho: MAXIMUM, neverSettles: MAXIMUM, error: MAXIMUM, slow: MAXIMUM },
    targets: CASES.flatMap(({ network }) =>
      KINDS.map(({ kind, settles }) => ({
        name: targetName(kind, network),
        network,
        x402Version: 2 as const,
        v2Offer: { scheme: 'upto' as const, uptoChargeMicroUsdc: settles },
      })),
    ),
  });
  try {
    // After the target settled, the answer is cut half-way: we never see its PAYMENT-RESPONSE.
    breaking = await startFaultProxy({
      upstream: peers.targets[targetName('less', 'polygon-amoy')]!.url,
      choose: (request) => (request.headers['payment-signature'] ? 'reset_mid_body' : 'pass'),
    });
    const allowed = new URL(breaking.url).host;
    t = await startTestService({ ...peersEnv(peers, [allowed]) }, { resolver: tableResolver() });
    db = t.database.handle.db;
  } catch (error) {
    await breaking?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await breaking?.close();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const erc20Events = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

describe.each(CASES)('upto targets on $network', ({ network, clientNetwork }) => {
  const chain = () => peers.evmChains[network]!;
  const token = () => getAddress(EVM_NETWORKS[network].usdc);

  async function balances(target: Target) {
    return {
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    };
  }

  /** The token's transfers in a settlement, read from its receipt: a successful call of the upto proxy. */
  async function settlementTransfers(hash: string) {
    const receipt = await chain().publicClient.getTransactionReceipt({ hash: hash as Hash });
    expect(receipt.status).toBe('success');
    expect(getAddress(receipt.to!)).toBe(UPTO_PROXY);
    return parseEventLogs({ abi: erc20Events, logs: receipt.logs, eventName: 'Transfer' })
      .filter((log) => getAddress(log.address) === token())
      .map(({ args }) => args);
  }

  /** The paid call the target saw carried our upto permit: the maximum, to its payTo, settled only by its facilitator. */
  function expectOurPermit(target: Target, unpaidCalls: number) {
    const payment = decodePaymentSignatureHeader(paidCallAfter(target, unpaidCalls).payment!);
    expect(payment.accepted).toMatchObject({ scheme: 'upto', amount: atomic(network, MAXIMUM).toString() });
    expect(payment.payload).toMatchObject({
      permit2Authorization: {
        from: service(),
        spender: UPTO_PROXY,
        permitted: { token: token(), amount: atomic(network, MAXIMUM).toString() },
        witness: {
          to: getAddress(target.routes.paid.payTo),
          facilitator: getAddress(peers.facilitatorV2.evmAddress),
          validAfter: '0',
        },
      },
    });
  }

  describe.each(KINDS)('a target settling $kind', ({ kind, settles, credits, relayCharged }) => {
    const target = (): Target => peers.targets[targetName(kind, network)]!;

    it(`/proxy holds ${RESERVED} credits for the maximum and charges ${credits}: what the target settled on chain plus the fee`, async () => {
      target().reset();
      const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
      const before = await balances(target());

      const res = await t.client.post(
        '/proxy',
        { api_url: target().routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': key } },
      );

      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ ok: true, route: 'paid', target: target().name, network });
      expectOurPermit(target(), 1);
      const receipt = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
      expect(receipt).toMatchObject({
        ok: true,
        value: { success: true, network, payer: service(), amount: atomic(network, settles).toString() },
      });
      const transaction = receipt.ok ? receipt.value.transaction : '';
      expect(res.headers.get('x-credits-charged')).toBe(credits.toString());
      // The chain: exactly what the target settled left our wallet for its payTo, through the upto proxy.
      const used = atomic(network, settles);
      expect(await settlementTransfers(transaction)).toEqual([
        { from: service(), to: getAddress(target().routes.paid.payTo), value: used },
      ]);
      expect(await balances(target())).toEqual({ service: before.service - used, target: before.target + used });
      // The ledger: the maximum plus the fee held, what was used plus the fee on it charged, the rest released.
      expect(await organisationBalance(db, organisationId)).toBe(1_000n - credits);
      expect(await ledgerSums(db, organisationId)).toEqual({
        grant: 1_000n,
        reserve: RESERVED,
        charge: credits,
        release: RESERVED - credits,
        refund: 0n,
      });
      const rows = await db
        .selectFrom('proxy_payments')
        .selectAll()
        .where('organisation_id', '=', organisationId)
        .execute();
      expect(rows).toMatchObject([
        {
          state: 'charged',
          scheme: 'upto',
          network,
          tx_hash: transaction,
          amount_micro_usdc: settles,
          credits,
          max_amount_micro_usdc: MAXIMUM,
          reserved_credits: RESERVED,
        },
      ]);
    });

    it(`/relay: an exact client pays ${RELAY_MAX_TOTAL} micro-USDC on ${clientNetwork}, we pay the target by upto, and the client ends up paying ${relayCharged}`, async () => {
      target().reset();
      const before = await balances(target());
      const client = peers.wallets.client.evm.address;
      const clientBefore = await peers.usdcBalance(clientNetwork, client);
      const ourBefore = await peers.usdcBalance(clientNetwork, service());

      // The unmodified x402-fetch 1.2.0: it pays exact only, what our 402 asks.
      const res = await payingFetch(peers, clientNetwork)(
        `${t.service.url}/relay`,
        relayRequest({ api_url: target().routes.paid.url, method: 'GET' }),
      );

      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ ok: true, route: 'paid', target: target().name, network });
      expectOurPermit(target(), 2);
      const clientTx = res.headers.get('x-client-payment')!;
      const receipt = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
      expect(receipt).toMatchObject({
        ok: true,
        value: { success: true, network, amount: atomic(network, settles).toString() },
      });
      const used = atomic(network, settles);
      expect(await settlementTransfers(receipt.ok ? receipt.value.transaction : '')).toEqual([
        { from: service(), to: getAddress(target().routes.paid.payTo), value: used },
      ]);
      expect(await balances(target())).toEqual({ service: before.service - used, target: before.target + used });

      const refundMicro = RELAY_MAX_TOTAL - relayCharged;
      const refundRecord = res.headers.get('x-refund-webhook-id');
      if (refundMicro > 0n) {
        // The unused part and the fee on it come back by the refund job, on the client's own network.
        expect(refundRecord).not.toBeNull();
        const record = await pollWebhook(t, refundRecord!, 30_000);
        expect(record.status, record.text).toBe(200);
        expect(record.body).toMatchObject({ status: 'refund_confirmed', network: clientNetwork });
      } else {
        expect(refundRecord).toBeNull();
      }
      // The client's network: taken the maximum plus the fee, given back what the target did not use.
      expect(await peers.usdcBalance(clientNetwork, client)).toBe(clientBefore - relayCharged);
      expect(await peers.usdcBalance(clientNetwork, service())).toBe(ourBefore + relayCharged);
      const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientTx);
      expect(row).toMatchObject({
        state: refundMicro > 0n ? 'refunded' : 'delivered',
        amount_micro: RELAY_MAX_TOTAL,
        target_scheme: 'upto',
        target_network: network,
        target_amount_micro: MAXIMUM,
        target_used_micro: settles,
        charged_micro: relayCharged,
        refund_micro: refundMicro > 0n ? refundMicro : null,
      });
      const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row!.id).execute();
      expect(
        refunds.map(({ status, amount_micro, network: paidOn, recipient }) => ({
          status,
          amount_micro,
          paidOn,
          recipient,
        })),
      ).toEqual(
        refundMicro > 0n
          ? [{ status: 'confirmed', amount_micro: refundMicro, paidOn: clientNetwork, recipient: client }]
          : [],
      );
    });
  });
});

describe.each(CASES)('dry runs of an upto target on $network', ({ network }) => {
  const target = (): Target => peers.targets[targetName('less', network)]!;
  const maximum = () => atomic(network, MAXIMUM).toString();

  async function untouched<T>(run: () => Promise<T>): Promise<T> {
    target().reset();
    const before = {
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target().routes.paid.payTo),
    };
    const result = await run();
    // Called once unpaid, nothing paid.
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    expect({
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target().routes.paid.payTo),
    }).toEqual(before);
    return result;
  }

  it(`/proxy/sim shows the maximum, the ${RESERVED} credits held, and the rule; nothing is reserved`, async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 100n });

    const res = await untouched(() =>
      t.client.post(
        '/proxy/sim',
        { api_url: target().routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': key } },
      ),
    );

    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      status: 402,
      paymentRequirements: { scheme: 'upto', network, maxAmountRequired: maximum() },
      feeBreakdown: { targetAmount: 0.02, proxyFee: 0.0006, totalAmount: 0.0206, totalCredits: Number(RESERVED) },
      pricing: { scheme: 'upto', maxTargetAmount: 0.02, maxTotalAmount: 0.0206, maxTotalCredits: Number(RESERVED) },
    });
    expect((res.body as { pricing: { rule: string } }).pricing.rule).toBe(
      'upto: the target settles what the call uses, at most 0.02 USDC; 21 credits (the maximum plus the 3% fee) are held, the account is charged what the target settles plus the fee on it, and the rest is released',
    );
    expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: 0n, charge: 0n });
  });

  it('/relay/sim shows the maximum plus the fee as the most a client pays, and the rule', async () => {
    const res = await untouched(() =>
      t.client.post('/relay/sim', { api_url: target().routes.paid.url, method: 'GET' }),
    );

    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: { scheme: 'upto', network, maxAmountRequired: maximum() },
      relayFeeBreakdown: { targetAmount: 0.02, relayFee: 0.0006, totalAmount: 0.0206 },
      pricing: { scheme: 'upto', maxTargetAmount: 0.02, maxTotalAmount: 0.0206 },
    });
    expect((res.body as { pricing: { rule: string } }).pricing.rule).toBe(
      'upto: the target settles what the call uses, at most 0.02 USDC; you pay at most 0.0206 USDC (the maximum plus the fee) and are charged what the target settles plus the fee on it; the rest is refunded to you on the network you paid on',
    );
  });
});

describe('an upto settlement the target does not report', () => {
  it("is found by the watch job from the chain (Permit2 nonce, the token's logs) and charged what it moved plus the fee, the rest released", async () => {
    const network: EvmNetworkName = 'polygon-amoy';
    const target = peers.targets[targetName('less', network)]!;
    target.reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = {
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    };

    const res = await t.client.post(
      '/proxy',
      { api_url: `${breaking!.url}${new URL(target.routes.paid.url).pathname}`, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(502);
    const webhookId = (res.body as { webhook_id?: string }).webhook_id!;
    expect(webhookId).toBeDefined();
    const record = await pollWebhook(t, webhookId, 30_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'success', network });
    const used = atomic(network, USED);
    expect({
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    }).toEqual({ service: before.service - used, target: before.target + used });
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - USED_CREDITS);
    expect(await ledgerSums(db, organisationId)).toEqual({
      grant: 1_000n,
      reserve: RESERVED,
      charge: USED_CREDITS,
      release: RESERVED - USED_CREDITS,
      refund: 0n,
    });
    const [row] = await db
      .selectFrom('proxy_payments')
      .selectAll()
      .where('organisation_id', '=', organisationId)
      .execute();
    expect(row).toMatchObject({ state: 'charged', scheme: 'upto', amount_micro_usdc: USED, credits: USED_CREDITS });
    expect(row!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
  });
});

describe('an upto settlement the target does not report, on /relay', () => {
  it('is found by the relay watch job; the exact client is refunded the unused part on its own network', async () => {
    const network: EvmNetworkName = 'polygon-amoy';
    const clientNetwork: EvmNetworkName = 'base-sepolia';
    const target = peers.targets[targetName('less', network)]!;
    target.reset();
    const client = peers.wallets.client.evm.address;
    const before = {
      client: await peers.usdcBalance(clientNetwork, client),
      ours: await peers.usdcBalance(clientNetwork, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    };

    const res = await payingFetch(peers, clientNetwork)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: `${breaking!.url}${new URL(target.routes.paid.url).pathname}`, method: 'GET' }),
    );

    // Our payment left, the target's answer did not arrive: a 502 with the record to poll.
    expect(res.status).toBe(502);
    const webhookId = res.headers.get('x-service-webhook')!;
    expect(webhookId).not.toBeNull();
    const record = await pollWebhook(t, webhookId, 30_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', network: clientNetwork });
    expect(await peers.usdcBalance(network, target.routes.paid.payTo)).toBe(before.target + atomic(network, USED));
    expect(await peers.usdcBalance(clientNetwork, client)).toBe(before.client - RELAY_USED_TOTAL);
    expect(await peers.usdcBalance(clientNetwork, service())).toBe(before.ours + RELAY_USED_TOTAL);
    const [row] = (await relayRows(db)).filter(
      (candidate) => candidate.client_tx_hash === res.headers.get('x-client-payment'),
    );
    expect(row).toMatchObject({
      state: 'refunded',
      target_used_micro: USED,
      charged_micro: RELAY_USED_TOTAL,
      refund_micro: RELAY_MAX_TOTAL - RELAY_USED_TOTAL,
    });
  });
});
