// The x402-protected targets: what each route answers, what they record, how they count concurrent
// requests, and that our own payment layer answers as x402-express does.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decodePaymentResponseHeader,
  EVM_NETWORKS,
  startPeers,
  type EchoedRequest,
  type PaymentRequiredBody,
  type Peers,
} from '../../devnet/index.js';
import { usdcAbi } from '../../devnet/evm/usdc.js';
import { decodePaymentHeader, type ExactEvmPayload } from '../../devnet/x402.js';
import { ifStarted } from '../support/teardown';

const PRICE = 7_000n;
const SLOW_DELAY_MS = 300;
const OTHER_PAYEE = '0x00000000000000000000000000000000000a11ce';
let peers: Peers;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base-sepolia', 'skale-base', 'solana-devnet'],
    pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE, neverSettles: PRICE, error: PRICE, slow: null },
    targets: [
      {
        name: 'express',
        network: 'base-sepolia',
        slowDelayMs: SLOW_DELAY_MS,
        routes: { error: { payTo: OTHER_PAYEE } },
      },
      { name: 'own', network: 'base-sepolia', paymentLayer: 'own' },
      { name: 'skale', network: 'skale-base', pricesMicroUsdc: { hold: 1_000n } },
      { name: 'solana', network: 'solana-devnet' },
    ],
  });
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

const express = () => peers.targets.express!;

async function paymentRequired(url: string, init?: RequestInit): Promise<PaymentRequiredBody> {
  const response = await fetch(url, init);
  expect(response.status).toBe(402);
  return (await response.json()) as PaymentRequiredBody;
}

describe('free routes', () => {
  it('answer without payment and without asking the facilitator', async () => {
    const callsBefore = peers.facilitator.calls.length;
    const response = await fetch(express().routes.free.url);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true, route: 'free', target: 'express', network: 'base-sepolia' });
    expect(peers.facilitator.calls).toHaveLength(callsBefore);
  });

  it('echo the request as received: method, path, query, headers, body text, content type', async () => {
    const body = 'name=a%20b&amount=1';
    const response = await fetch(`${express().routes.echo.url}?x=1&y=two&y=three`, {
      method: 'PUT',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-custom': 'kept' },
      body,
    });
    const echoed = (await response.json()) as EchoedRequest;
    expect(echoed).toMatchObject({
      method: 'PUT',
      path: '/echo',
      query: { x: '1', y: ['two', 'three'] },
      body,
      contentType: 'application/x-www-form-urlencoded',
    });
    expect(echoed.headers['x-custom']).toBe('kept');
    const recorded = express().requests.at(-1)!;
    expect(recorded).toMatchObject({ route: 'echo', method: 'PUT', body, status: 200, payment: null });
  });
});

describe('paid routes', () => {
  it('echo the paid retry with its X-PAYMENT, and record the settlement they sent back', async () => {
    const response = await peers.x402Fetch('base-sepolia')(express().routes.paidEcho.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ question: 42 }),
    });
    expect(response.status).toBe(200);
    const echoed = (await response.json()) as EchoedRequest;
    expect(echoed.body).toBe('{"question":42}');
    expect(typeof echoed.headers['x-payment']).toBe('string');
    const [first, retry] = express().requests.filter((request) => request.route === 'paidEcho');
    expect(first).toMatchObject({ status: 402, payment: null, paymentResponse: null });
    expect(retry!.status).toBe(200);
    expect(decodePaymentResponseHeader(retry!.paymentResponse!)).toMatchObject({
      success: true,
      network: 'base-sepolia',
    });
  });

  it('use the payTo and price set for the route', async () => {
    const body = await paymentRequired(express().routes.error.url);
    expect(body.accepts[0]).toMatchObject({
      payTo: '0x00000000000000000000000000000000000A11cE',
      maxAmountRequired: PRICE.toString(),
    });
    expect((await paymentRequired(express().routes.paid.url)).accepts[0]!.payTo).toBe(peers.wallets.target.evm.address);
  });
});

describe('a route that never settles', () => {
  it('asks again with the same requirements, never calls settle, and the authorization stays unused', async () => {
    const url = express().routes.neverSettles.url;
    const first = await paymentRequired(url);
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance('base-sepolia', payer);
    const settlesBefore = peers.facilitator.calls.filter((call) => call.path === '/settle').length;
    const { header } = await peers.signEvmPayment(first.accepts[0]!);

    const again = await paymentRequired(url, { headers: { 'X-PAYMENT': header } });

    expect(again.accepts).toEqual(first.accepts);
    expect(peers.facilitator.calls.filter((call) => call.path === '/settle')).toHaveLength(settlesBefore);
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(before);
    const { authorization } = decodePaymentHeader(header).payload as ExactEvmPayload;
    const used = await peers.evmChains['base-sepolia']!.publicClient.readContract({
      address: EVM_NETWORKS['base-sepolia'].usdc,
      abi: usdcAbi,
      functionName: 'authorizationState',
      args: [authorization.from, authorization.nonce],
    });
    expect(used).toBe(false);
  });
});

describe('a route that fails', () => {
  it('answers 5xx after verifying the payment and settles nothing', async () => {
    const requirements = (await paymentRequired(express().routes.error.url)).accepts[0]!;
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance('base-sepolia', payer);
    const { header } = await peers.signEvmPayment(requirements);

    const failed = await fetch(express().routes.error.url, { headers: { 'X-PAYMENT': header } });
    const chosen = await fetch(`${express().routes.error.url}?status=503`, { headers: { 'X-PAYMENT': header } });

    expect(failed.status).toBe(500);
    expect(failed.headers.get('x-payment-response')).toBeNull();
    expect(chosen.status).toBe(503);
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(before);
  });
});

describe('a slow route', () => {
  it('answers after the configured delay, or the one the query asks for', async () => {
    const started = performance.now();
    expect((await fetch(express().routes.slow.url)).status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(SLOW_DELAY_MS - 5);
    const quick = await fetch(`${express().routes.slow.url}?delayMs=20`);
    expect(await quick.json()).toMatchObject({ route: 'slow', delayMs: 20 });
  });
});

describe('the hold route', () => {
  it('keeps requests open until released and counts how many were waiting at once', async () => {
    const target = express();
    target.reset();
    const pending = Array.from({ length: 6 }, () => fetch(target.routes.hold.url));
    await target.hold.waitForWaiting(6, 5_000);
    expect(target.hold.waiting).toBe(6);
    expect(target.inFlight).toBe(6);

    expect(target.hold.release(2)).toBe(2);
    const firstTwo = await Promise.all(pending.slice(0, 2));
    expect(firstTwo.map((response) => response.status)).toEqual([200, 200]);
    expect(target.hold.waiting).toBe(4);

    expect(target.hold.release()).toBe(4);
    expect((await Promise.all(pending.slice(2))).map((response) => response.status)).toEqual([200, 200, 200, 200]);
    expect(target.hold.arrivals).toBe(6);
    expect(target.hold.maxWaiting).toBe(6);
    expect(target.maxInFlight).toBe(6);
    expect(target.inFlight).toBe(0);
  });

  it('holds paid requests only after their payment was verified', async () => {
    const target = peers.targets.skale!;
    const requirements = (await paymentRequired(target.routes.hold.url)).accepts[0]!;
    expect(target.hold.arrivals).toBe(0);
    const { header } = await peers.signEvmPayment(requirements);
    const pending = fetch(target.routes.hold.url, { headers: { 'X-PAYMENT': header } });
    await target.hold.waitForWaiting(1, 5_000);
    target.hold.release();
    const response = await pending;
    expect(response.status).toBe(200);
    expect(decodePaymentResponseHeader(response.headers.get('x-payment-response')!).success).toBe(true);
  });
});

describe('our own payment layer', () => {
  it('asks with the same 402 body as x402-express', async () => {
    const standard = await paymentRequired(express().routes.paid.url);
    const ours = await paymentRequired(peers.targets.own!.routes.paid.url);
    const withoutResource = (body: PaymentRequiredBody) => ({
      ...body,
      accepts: body.accepts.map(({ resource, ...rest }) => ({ ...rest, resource: new URL(resource).pathname })),
    });
    expect(peers.targets.own!.routes.paid.paymentLayer).toBe('own');
    expect(withoutResource(ours)).toEqual(withoutResource(standard));

    const solana = await paymentRequired(peers.targets.solana!.routes.paid.url);
    expect(solana.accepts[0]).toMatchObject({
      network: 'solana-devnet',
      asset: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
      payTo: peers.wallets.target.solana.address,
      extra: { feePayer: peers.facilitator.solanaFeePayer },
    });
  });

  it('is paid by unmodified x402-fetch', async () => {
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance('base-sepolia', payer);
    const response = await peers.x402Fetch('base-sepolia')(peers.targets.own!.routes.paid.url);
    expect(response.status).toBe(200);
    expect(decodePaymentResponseHeader(response.headers.get('x-payment-response')!)).toMatchObject({
      success: true,
      payer,
    });
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(before - PRICE);
  });

  it('refuses a payment for another network with 402', async () => {
    const requirements = (await paymentRequired(peers.targets.own!.routes.paid.url)).accepts[0]!;
    const { header } = await peers.signEvmPayment(requirements, { network: 'base' });
    const body = await paymentRequired(peers.targets.own!.routes.paid.url, { headers: { 'X-PAYMENT': header } });
    expect(body.error).toBe('Unable to find matching payment requirements');
  });
});
