// Paying targets in the x402 version they speak: a table of target {x402-express 1.2 (version 1),
// @x402/express 2.27 (version 2, unmodified, with @x402/core's facilitator)} x {/proxy, /relay,
// /proxy/sim, /relay/sim}. Every answer is checked against the document by the contract client (or
// contractFetch under x402-fetch); every money leg is read from the chain: the target's wallet gets
// exactly the price, a /relay client pays exactly price + fee, a simulation moves nothing. A
// version 2 target gets PAYMENT-SIGNATURE with `accepted` equal to the entry it offered; the
// target's own x402 headers never reach our client.
import { decodePaymentResponseHeader } from '@x402/core/http';
import { parseAbi, parseEventLogs, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { decodePaymentHeader, decodePaymentResponseHeader as decodeOurReceipt } from '../../payments/x402/headers';
import type { Peers, Target } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import {
  expectOurReceipt,
  expectProxyCharged,
  expectRelayDelivered,
  paidCallAfter,
  v2PaymentOf,
  withoutTargetHeaders,
} from '../support/paid-target';
import { ledgerSums, startPeersAndProxyService } from '../support/proxy';
import { payingFetch, relayRequest } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const NETWORK = 'base-sepolia';
const CAIP2 = 'eip155:84532';
const PRICE = 12_345n;
/** ceil(12,345 x 1.03) micro-USDC: what a /relay client pays. */
const RELAY_TOTAL = 12_716n;
/** ceil(12,345 x 1.03 / 1000) credits: what a /proxy account pays. */
const CREDITS = 13n;

const TARGETS = [
  { server: 'x402-express 1.2', name: 'v1', x402Version: 1 as const },
  { server: '@x402/express 2.27', name: 'v2', x402Version: 2 as const },
];
/** A caller's own payment headers in the call: never forwarded to a target, in either version. */
const CALLER_HEADERS = { 'PAYMENT-SIGNATURE': 'from-the-caller', 'X-Payment': 'from-the-caller' };

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE },
    targets: TARGETS.map(({ name, x402Version }) => ({ name, network: NETWORK, x402Version })),
  }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;

async function balances(target: Target) {
  return {
    service: await peers.usdcBalance(NETWORK, service()),
    client: await peers.usdcBalance(NETWORK, client()),
    target: await peers.usdcBalance(NETWORK, target.routes.paid.payTo),
  };
}

const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

/** The USDC transfers a transaction made, read from its receipt. */
async function transfers(hash: string) {
  const receipt = await peers.evmChains[NETWORK]!.publicClient.getTransactionReceipt({ hash: hash as Hash });
  expect(receipt.status).toBe('success');
  return parseEventLogs({ abi: transferEvent, logs: receipt.logs }).map(({ args }) => ({
    from: args.from,
    to: args.to,
    value: args.value,
  }));
}

/**
 * What the target saw: `unpaidCalls` unpaid calls (/relay asks the price again before it pays),
 * then one paid call in its own version. For version 2 the
 * payment echoes the offer of the target's own 402 verbatim; the version 1 payment names the network
 * as version 1 does. Returns the settlement the target reported (its own header).
 */
async function checkTargetSide(target: Target, x402Version: 1 | 2, unpaidCalls: number): Promise<string> {
  const paid = paidCallAfter(target, unpaidCalls);
  noCallerPayment(target);
  if (x402Version === 2) {
    const { payment, offered } = await v2PaymentOf(target, paid);
    expect(payment.resource).toStrictEqual(offered.resource);
    expect(payment.accepted).toMatchObject({ network: CAIP2, amount: PRICE.toString() });
    expect(payment.payload).toMatchObject({ authorization: { from: service(), value: PRICE.toString() } });
    const settlement = decodePaymentResponseHeader(paid.paymentResponse!);
    expect(settlement).toMatchObject({ success: true, network: CAIP2 });
    return settlement.transaction;
  }
  expect(paid.headers['payment-signature']).toBeUndefined();
  expect(decodePaymentHeader(paid.payment, PAYMENT_SCHEMES)).toMatchObject({
    ok: true,
    value: { x402Version: 1, network: NETWORK },
  });
  const settlement = decodeOurReceipt(paid.paymentResponse);
  expect(settlement).toMatchObject({ ok: true, value: { success: true, network: NETWORK } });
  return settlement.ok ? settlement.value.transaction : '';
}

/** No request the target received carried the caller's payment headers. */
function noCallerPayment(target: Target): void {
  expect(target.requests.length).toBeGreaterThan(0);
  for (const request of target.requests) {
    expect(request.headers['payment-signature']).not.toBe('from-the-caller');
    expect(request.headers['x-payment']).not.toBe('from-the-caller');
  }
}

describe.each(TARGETS)('a target served by $server (x402 version $x402Version)', ({ name, x402Version }) => {
  const target = () => peers.targets[name]!;

  it('/proxy pays it in its version: the target gets exactly the price, the account exactly the credits', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await balances(target());

    const res = await t.client.post(
      '/proxy',
      { api_url: target().routes.paid.url, method: 'GET', headers: CALLER_HEADERS },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'paid', target: name, network: NETWORK });
    withoutTargetHeaders(res.headers);
    const targetTx = await checkTargetSide(target(), x402Version, 1);
    // Our receipt of our payment, version 1 form, naming the transaction the chain shows.
    expectOurReceipt(res.headers, NETWORK, service(), targetTx);
    expect(await transfers(targetTx)).toEqual([{ from: service(), to: target().routes.paid.payTo, value: PRICE }]);

    const after = await balances(target());
    expect(after.target).toBe(before.target + PRICE);
    expect(after.service).toBe(before.service - PRICE);
    await expectProxyCharged(db, organisationId, {
      network: NETWORK,
      price: PRICE,
      credits: CREDITS,
      transaction: targetTx,
    });
  });

  it('/relay: x402-fetch pays us price + fee, we pay the target exactly the price in its version', async () => {
    target().reset();
    const before = await balances(target());

    const res = await payingFetch(peers, NETWORK)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target().routes.paid.url, method: 'GET', headers: CALLER_HEADERS }),
    );

    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, route: 'paid', target: name, network: NETWORK });
    withoutTargetHeaders(res.headers);
    const clientTx = res.headers.get('x-client-payment')!;
    expect(await transfers(clientTx)).toEqual([{ from: client(), to: service(), value: RELAY_TOTAL }]);
    const targetTx = await checkTargetSide(target(), x402Version, 2);
    expectOurReceipt(res.headers, NETWORK, service(), targetTx);
    expect(await transfers(targetTx)).toEqual([{ from: service(), to: target().routes.paid.payTo, value: PRICE }]);

    const after = await balances(target());
    expect(after.client).toBe(before.client - RELAY_TOTAL);
    expect(after.target).toBe(before.target + PRICE);
    expect(after.service).toBe(before.service + RELAY_TOTAL - PRICE);
    await expectRelayDelivered(db, clientTx, { network: NETWORK, total: RELAY_TOTAL, price: PRICE });
  });

  it('/proxy/sim prices it and pays nothing', async () => {
    target().reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 100n });
    const before = await balances(target());

    const res = await t.client.post(
      '/proxy/sim',
      { api_url: target().routes.paid.url, method: 'GET', headers: CALLER_HEADERS },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(200);
    withoutTargetHeaders(res.headers);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      status: 402,
      paymentRequirements: {
        scheme: 'exact',
        network: NETWORK,
        maxAmountRequired: PRICE.toString(),
        payTo: target().routes.paid.payTo,
        resource: expect.stringContaining('/paid') as unknown,
      },
      feeBreakdown: { targetAmount: 0.012345, totalCredits: Number(CREDITS) },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    noCallerPayment(target());
    expect(await balances(target())).toEqual(before);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: 0n, charge: 0n });
  });

  it('/relay/sim prices it (price + fee) and pays nothing', async () => {
    target().reset();
    const before = await balances(target());

    const res = await t.client.post('/relay/sim', {
      api_url: target().routes.paid.url,
      method: 'GET',
      headers: CALLER_HEADERS,
    });

    expect(res.status, res.text).toBe(200);
    withoutTargetHeaders(res.headers);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: {
        scheme: 'exact',
        network: NETWORK,
        maxAmountRequired: PRICE.toString(),
        payTo: target().routes.paid.payTo,
      },
      relayFeeBreakdown: { targetAmount: 0.012345, totalAmount: Number(RELAY_TOTAL) / 1e6 },
    });
    expect(target().requests.map((request) => request.payment)).toEqual([null]);
    noCallerPayment(target());
    expect(await balances(target())).toEqual(before);
  });
});
