// POST /relay, /relay/sim, /sim and GET /relay/limits against the local peers: the unmodified
// x402-fetch (or a hand-signed X-PAYMENT where it cannot) pays the service, the service pays
// x402-express targets from its wallet, on the same chain or across EVM and Solana. Every response
// is checked against the document; every amount is read from the chains themselves.
import { parseEventLogs, parseAbi, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { utcDay } from '../../payments/basics/clock';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import {
  startPeers,
  isEvmNetwork,
  type NetworkName,
  type Peers,
  type PaymentRequirements as PeerRequirements,
} from '../../devnet/index';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import { pollWebhook, startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** ceil(12,345 x 1.03) = ceil(12,715.35) */
const TOTAL = 12_716n;
const WINDOW_SECONDS = 10;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base-sepolia', 'skale-base-sepolia', 'skale-base', 'solana-devnet'],
    pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE, neverSettles: PRICE, error: PRICE },
  });
  t = await startProxyService(peers, { RELAY_PAYMENT_WINDOW_SECONDS: String(WINDOW_SECONDS) });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const relayUrl = () => `${t.service.url}/relay`;
const target = (network: NetworkName) => peers.targets[network]!;
const serviceAddress = (network: NetworkName) =>
  isEvmNetwork(network) ? peers.wallets.service.evm.address : peers.wallets.service.solana.address;
const clientAddress = (network: NetworkName) =>
  isEvmNetwork(network) ? peers.wallets.client.evm.address : peers.wallets.client.solana.address;

async function balances(clientNetwork: NetworkName, targetNetwork: NetworkName, payTo: string) {
  return {
    client: await peers.usdcBalance(clientNetwork, clientAddress(clientNetwork)),
    serviceIn: await peers.usdcBalance(clientNetwork, serviceAddress(clientNetwork)),
    serviceOut: await peers.usdcBalance(targetNetwork, serviceAddress(targetNetwork)),
    target: await peers.usdcBalance(targetNetwork, payTo),
  };
}

const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

/** The USDC transfers a transaction made, read from its receipt. */
async function evmTransfers(network: NetworkName, hash: string) {
  const chain = peers.evmChains[network as 'base-sepolia']!;
  const receipt = await chain.publicClient.getTransactionReceipt({ hash: hash as Hash });
  expect(receipt.status).toBe('success');
  return parseEventLogs({ abi: transferEvent, logs: receipt.logs }).map((log) => ({
    from: log.args.from,
    to: log.args.to,
    value: log.args.value,
  }));
}

async function unpaid(body: Record<string, unknown>) {
  return t.client.post('/relay', body);
}

describe('the first call, without X-PAYMENT', () => {
  it('answers our 402: the target network first, our wallet, USDC, ceil(price x 1.03), and what standard clients need', async () => {
    const res = await unpaid({ api_url: target('base-sepolia').routes.paid.url, method: 'GET' });
    expect(res.status).toBe(402);
    expect(res.headers.get('x-service-status')).toBe('payment_required');
    expect(res.body).toMatchObject({
      x402Version: 1,
      error: 'X-PAYMENT header is required',
      serviceStatus: 'payment_required',
    });
    const accepts = res.body.accepts as PeerRequirements[];
    // Testnet class; skale-base-sepolia is known to x402 clients, skale-base (mainnet) is not offered.
    expect(accepts.map((entry) => entry.network)).toEqual(['base-sepolia', 'skale-base-sepolia', 'solana-devnet']);
    for (const entry of accepts) {
      expect(entry).toMatchObject({
        scheme: 'exact',
        maxAmountRequired: TOTAL.toString(),
        payTo: serviceAddress(entry.network as NetworkName),
        resource: relayUrl(),
        description: `Relay of GET ${target('base-sepolia').routes.paid.url}`,
        mimeType: 'application/json',
        maxTimeoutSeconds: 300,
      });
    }
    expect(accepts[0]).toMatchObject({
      asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
      extra: { name: 'USDC', version: '2' },
    });
    expect(accepts[2]).toMatchObject({
      asset: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
      extra: { feePayer: peers.wallets.service.solana.address },
    });
  });

  it('offers only the network the body names; a network of the other class is a 400', async () => {
    const named = await unpaid({
      api_url: target('base-sepolia').routes.paid.url,
      method: 'GET',
      network: 'solana-devnet',
    });
    expect(named.status).toBe(402);
    expect(named.body.accepts.map((entry: PeerRequirements) => entry.network)).toEqual(['solana-devnet']);
    const otherClass = await unpaid({
      api_url: target('base-sepolia').routes.paid.url,
      method: 'GET',
      network: 'skale-base',
    });
    expect(otherClass.status).toBe(400);
    expect(otherClass.body.details).toMatch(/skale-base is a mainnet network; this target is paid on testnet/);
    // A standard client would reject the whole 402 if it named skale-base, the only mainnet here: the client must name it.
    const mainnet = await unpaid({ api_url: target('skale-base').routes.paid.url, method: 'GET' });
    expect(mainnet.status).toBe(400);
    expect(mainnet.body.details).toMatch(/name it in the body \("network": "skale-base"\)/);
    const namedMainnet = await unpaid({
      api_url: target('skale-base').routes.paid.url,
      method: 'GET',
      network: 'skale-base',
    });
    expect(namedMainnet.body.accepts).toMatchObject([
      { network: 'skale-base', maxAmountRequired: TOTAL.toString(), extra: { name: 'Bridged USDC (SKALE Bridge)' } },
    ]);
  });

  it('a free target answers through the relay: nothing charged, nothing recorded; format=json wraps it', async () => {
    const before = (await relayRows(db)).length;
    const res = await unpaid({ api_url: target('base-sepolia').routes.free.url, method: 'GET' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'free', target: 'base-sepolia', network: 'base-sepolia' });
    expect(res.headers.get('x-client-payment')).toBeNull();
    const wrapped = await t.client.post('/relay?format=json', {
      api_url: target('base-sepolia').routes.free.url,
      method: 'GET',
    });
    expect(wrapped.body).toEqual({
      success: true,
      result: { ok: true, route: 'free', target: 'base-sepolia', network: 'base-sepolia' },
    });
    const missing = await t.client.post('/relay?format=json', {
      api_url: `${target('base-sepolia').url}/missing`,
      method: 'GET',
    });
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ success: false, status: 404 });
    expect((await relayRows(db)).length).toBe(before);
  });
});

describe('a paid relay, same chain', () => {
  it('x402-fetch pays /relay on base-sepolia and receives the target body; both legs are exact on-chain', async () => {
    const network = 'base-sepolia';
    const payTo = target(network).routes.paid.payTo;
    const before = await balances(network, network, payTo);
    target(network).reset();

    const started = performance.now();
    const res = await payingFetch(peers, network)(
      relayUrl(),
      relayRequest({ api_url: target(network).routes.paid.url, method: 'GET' }),
    );
    const relayMs = performance.now() - started;

    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, route: 'paid', target: network, network });
    const clientPayment = res.headers.get('x-client-payment')!;
    expect(await evmTransfers(network, clientPayment)).toEqual([
      { from: clientAddress(network), to: serviceAddress(network), value: TOTAL },
    ]);
    const toTarget = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
    expect(toTarget).toMatchObject({ ok: true, value: { success: true, network, payer: serviceAddress(network) } });
    if (toTarget.ok)
      expect(await evmTransfers(network, toTarget.value.transaction)).toEqual([
        { from: serviceAddress(network), to: payTo, value: PRICE },
      ]);
    expect(res.headers.get('x-service-webhook')).toBeNull();

    const after = await balances(network, network, payTo);
    expect(after.client).toBe(before.client - TOTAL);
    expect(after.target).toBe(before.target + PRICE);
    expect(after.serviceIn).toBe(before.serviceIn + TOTAL - PRICE);
    const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientPayment);
    expect(row).toMatchObject({
      state: 'delivered',
      amount_micro: TOTAL,
      target_amount_micro: PRICE,
      target_network: network,
      target_status: 200,
      mode: 'relay',
    });

    // For the record: a direct x402-fetch call of the same target.
    const directStarted = performance.now();
    const direct = await peers.x402Fetch(network)(target(network).routes.paid.url);
    const directMs = performance.now() - directStarted;
    expect(direct.status).toBe(200);
    console.info(`relay timing: paid /relay ${relayMs.toFixed(0)} ms, direct x402-fetch ${directMs.toFixed(0)} ms`);
  });

  it('on skale-base-sepolia, named in the body, x402-fetch pays and the target is paid', async () => {
    const network = 'skale-base-sepolia';
    const payTo = target(network).routes.paid.payTo;
    const before = await balances(network, network, payTo);
    const res = await payingFetch(peers, network)(
      relayUrl(),
      relayRequest({ api_url: target(network).routes.paid.url, method: 'GET', network }),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ route: 'paid', network });
    expect(await evmTransfers(network, res.headers.get('x-client-payment')!)).toEqual([
      { from: clientAddress(network), to: serviceAddress(network), value: TOTAL },
    ]);
    const after = await balances(network, network, payTo);
    expect([after.client, after.target, after.serviceIn]).toEqual([
      before.client - TOTAL,
      before.target + PRICE,
      before.serviceIn + TOTAL - PRICE,
    ]);
  });

  it('on skale-base (which x402-fetch does not know), a hand-signed X-PAYMENT for the named network', async () => {
    const network = 'skale-base';
    const payTo = target(network).routes.paid.payTo;
    const before = await balances(network, network, payTo);
    const body = { api_url: target(network).routes.paid.url, method: 'GET', network };
    const offer = (await unpaid(body)).body.accepts[0] as PeerRequirements;
    const { header } = await peers.signEvmPayment(offer);
    const res = await t.client.post('/relay?format=json', body, { headers: { 'x-payment': header } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, result: { ok: true, route: 'paid', target: network, network } });
    expect(await evmTransfers(network, res.headers.get('x-client-payment')!)).toEqual([
      { from: clientAddress(network), to: serviceAddress(network), value: TOTAL },
    ]);
    const after = await balances(network, network, payTo);
    expect([after.client, after.target, after.serviceIn]).toEqual([
      before.client - TOTAL,
      before.target + PRICE,
      before.serviceIn + TOTAL - PRICE,
    ]);
  });
});

describe('a paid relay across chains', () => {
  it('a Solana client (x402-fetch) pays for an EVM target', async () => {
    const payTo = target('base-sepolia').routes.paid.payTo;
    const before = await balances('solana-devnet', 'base-sepolia', payTo);
    const res = await payingFetch(peers, 'solana-devnet')(
      relayUrl(),
      relayRequest({ api_url: target('base-sepolia').routes.paid.url, method: 'GET' }),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ route: 'paid', network: 'base-sepolia' });
    expect(res.headers.get('x-client-payment')).toMatch(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/);
    expect(decodePaymentResponseHeader(res.headers.get('x-payment-response'))).toMatchObject({
      ok: true,
      value: { success: true, network: 'base-sepolia' },
    });
    const after = await balances('solana-devnet', 'base-sepolia', payTo);
    expect(after.client).toBe(before.client - TOTAL);
    expect(after.serviceIn).toBe(before.serviceIn + TOTAL);
    expect(after.serviceOut).toBe(before.serviceOut - PRICE);
    expect(after.target).toBe(before.target + PRICE);
  });

  it('an EVM client (x402-fetch) pays for a Solana target', async () => {
    const payTo = target('solana-devnet').routes.paid.payTo;
    const before = await balances('base-sepolia', 'solana-devnet', payTo);
    const first = await unpaid({ api_url: target('solana-devnet').routes.paid.url, method: 'GET' });
    expect(first.body.accepts.map((entry: PeerRequirements) => entry.network)).toEqual([
      'solana-devnet',
      'base-sepolia',
      'skale-base-sepolia',
    ]);
    const res = await payingFetch(peers, 'base-sepolia')(
      relayUrl(),
      relayRequest({ api_url: target('solana-devnet').routes.paid.url, method: 'GET' }),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ route: 'paid', network: 'solana-devnet' });
    expect(await evmTransfers('base-sepolia', res.headers.get('x-client-payment')!)).toEqual([
      { from: clientAddress('base-sepolia'), to: serviceAddress('base-sepolia'), value: TOTAL },
    ]);
    const after = await balances('base-sepolia', 'solana-devnet', payTo);
    expect(after.client).toBe(before.client - TOTAL);
    expect(after.serviceIn).toBe(before.serviceIn + TOTAL);
    expect(after.serviceOut).toBe(before.serviceOut - PRICE);
    expect(after.target).toBe(before.target + PRICE);
  });
});

describe('a repeated X-PAYMENT', () => {
  const body = () => ({ api_url: target('base-sepolia').routes.paid.url, method: 'GET' });
  const offer = async () => (await unpaid(body())).body.accepts[0] as PeerRequirements;

  it('for the same request after it was used: the first answer again, and nothing moves', async () => {
    const { header } = await peers.signEvmPayment(await offer());
    const first = await t.client.post('/relay', body(), { headers: { 'X-Payment': header } });
    expect(first.status).toBe(200);
    const payTo = target('base-sepolia').routes.paid.payTo;
    const before = await balances('base-sepolia', 'base-sepolia', payTo);
    const again = await t.client.post('/relay', body(), { headers: { 'x-payment': header } });
    expect(again.status).toBe(200);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('x-client-payment')).toBe(first.headers.get('x-client-payment'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await balances('base-sepolia', 'base-sepolia', payTo)).toEqual(before);
  });

  it('for another request: refused with 400 as already used, and nothing moves', async () => {
    const { header } = await peers.signEvmPayment(await offer());
    expect((await t.client.post('/relay', body(), { headers: { 'X-Payment': header } })).status).toBe(200);
    const payTo = target('base-sepolia').routes.paid.payTo;
    const before = await balances('base-sepolia', 'base-sepolia', payTo);
    const again = await t.client.post(
      '/relay',
      { ...body(), headers: { 'x-another': 'request' } },
      { headers: { 'x-payment': header } },
    );
    expect(again.status).toBe(400);
    expect(again.body).toEqual({
      code: 'payment_reused',
      error: 'Bad Request',
      details: expect.stringContaining('nonce was already used'),
    });
    expect(await balances('base-sepolia', 'base-sepolia', payTo)).toEqual(before);
  });

  it('sent twice at once: exactly one settles, the other is told it runs (409) or gets its answer', async () => {
    const { header, payment } = await peers.signEvmPayment(await offer());
    const payTo = target('base-sepolia').routes.paid.payTo;
    const before = await balances('base-sepolia', 'base-sepolia', payTo);
    const [a, b] = await Promise.all(
      [0, 1].map(() => t.client.post('/relay', body(), { headers: { 'X-PAYMENT': header } })),
    );
    const statuses = [a!.status, b!.status].sort();
    expect([
      [200, 409],
      [200, 200],
    ]).toContainEqual(statuses);
    if (statuses[1] === 200) expect(a!.text).toBe(b!.text);
    const after = await balances('base-sepolia', 'base-sepolia', payTo);
    expect(after.client).toBe(before.client - TOTAL);
    expect(after.target).toBe(before.target + PRICE);
    const rows = (await relayRows(db)).filter(
      (row) => row.nonce_key === payment.payload.authorization.nonce.toLowerCase(),
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.state).toBe('delivered');
  });

  it('a payment of another amount is answered with the 402 of now, and nothing moves', async () => {
    const { header } = await peers.signEvmPayment(await offer(), { value: PRICE });
    const before = await peers.usdcBalance('base-sepolia', clientAddress('base-sepolia'));
    const res = await t.client.post('/relay', body(), { headers: { 'X-PAYMENT': header } });
    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/^wrong_amount/);
    expect(res.body.accepts[0].maxAmountRequired).toBe(TOTAL.toString());
    expect(await peers.usdcBalance('base-sepolia', clientAddress('base-sepolia'))).toBe(before);
  });
});

describe('the daily limits', () => {
  it('a wallet over its 100 USD: 429 with the figures, nothing settled, nothing recorded', async () => {
    const wallet = clientAddress('base-sepolia');
    const day = utcDay(new Date());
    await db
      .insertInto('daily_spend')
      .values({ scope: 'relay_wallet', scope_id: wallet, network_class: 'testnet', day, spent_micro_usdc: 99_995_000n })
      .onConflict((conflict) =>
        conflict.columns(['scope', 'scope_id', 'network_class', 'day']).doUpdateSet({ spent_micro_usdc: 99_995_000n }),
      )
      .execute();
    const limits = await t.client.get(`/relay/limits/${wallet.toLowerCase()}`);
    expect(limits.body.testnet.wallet_limits).toEqual({
      daily_limit: 100,
      today_spent: 99.995,
      remaining: 0.005,
      percentage_used: '100.0%',
    });
    expect(limits.body.testnet.can_relay).toBe(true);

    const rowsBefore = (await relayRows(db)).length;
    const clientBefore = await peers.usdcBalance('base-sepolia', wallet);
    const res = await payingFetch(peers, 'base-sepolia')(
      relayUrl(),
      relayRequest({ api_url: target('base-sepolia').routes.paid.url, method: 'GET' }),
    );
    expect(res.status).toBe(429);
    expect(await res.json()).toEqual({
      code: 'spend_limit_exceeded',
      error: 'Daily wallet spending limit exceeded',
      details: expect.stringContaining(`Wallet ${wallet} has spent 99.995 of its 100 USD testnet relay limit today`),
      currentSpend: 99.995,
      limit: 100,
      requestedAmount: 0.012716,
    });
    expect(await peers.usdcBalance('base-sepolia', wallet)).toBe(clientBefore);
    expect((await relayRows(db)).length).toBe(rowsBefore);
    await db.deleteFrom('daily_spend').where('scope', '=', 'relay_wallet').where('scope_id', '=', wallet).execute();
  });

  it('the whole service over its 1000 USD of the class: 429 naming the system limit, nothing settled', async () => {
    const wallet = clientAddress('base-sepolia');
    const key = {
      scope: 'relay_system' as const,
      scope_id: 'system',
      network_class: 'testnet' as const,
      day: utcDay(new Date()),
    };
    const previous = await db
      .selectFrom('daily_spend')
      .select('spent_micro_usdc')
      .where('scope', '=', key.scope)
      .where('scope_id', '=', key.scope_id)
      .where('network_class', '=', key.network_class)
      .where('day', '=', key.day)
      .executeTakeFirst();
    await db
      .insertInto('daily_spend')
      .values({ ...key, spent_micro_usdc: 999_990_000n })
      .onConflict((conflict) =>
        conflict.columns(['scope', 'scope_id', 'network_class', 'day']).doUpdateSet({ spent_micro_usdc: 999_990_000n }),
      )
      .execute();
    const clientBefore = await peers.usdcBalance('base-sepolia', wallet);
    const res = await payingFetch(peers, 'base-sepolia')(
      relayUrl(),
      relayRequest({ api_url: target('base-sepolia').routes.paid.url, method: 'GET' }),
    );
    expect(res.status).toBe(429);
    expect(await res.json()).toEqual({
      code: 'spend_limit_exceeded',
      error: 'Daily wallet spending limit exceeded',
      details: expect.stringContaining('The service has relayed 999.99 of its 1000 USD testnet relay limit today'),
      currentSpend: 999.99,
      limit: 1000,
      requestedAmount: 0.012716,
    });
    expect(await peers.usdcBalance('base-sepolia', wallet)).toBe(clientBefore);
    const limits = await t.client.get(`/relay/limits/${wallet}`);
    expect(limits.body.testnet.system_limits).toMatchObject({ daily_limit: 1000, today_spent: 999.99 });
    await db
      .updateTable('daily_spend')
      .set({ spent_micro_usdc: previous?.spent_micro_usdc ?? 0n })
      .where('scope', '=', key.scope)
      .where('scope_id', '=', key.scope_id)
      .where('network_class', '=', key.network_class)
      .where('day', '=', key.day)
      .execute();
  });

  it('GET /relay/limits/{address}: figures per class in USD; 400 for an address of no chain', async () => {
    const solana = await t.client.get(`/relay/limits/${peers.wallets.client.solana.address}`);
    expect(solana.status).toBe(200);
    expect(solana.body).toMatchObject({
      wallet_address: peers.wallets.client.solana.address,
      mainnet: {
        wallet_limits: { daily_limit: 100, today_spent: 0 },
        system_limits: { daily_limit: 1000 },
        can_relay: true,
      },
      testnet: { wallet_limits: { daily_limit: 100, today_spent: Number(TOTAL) / 1e6 } },
      relay_fee_model: 'flat 3% on top of the target amount',
    });
    for (const address of ['not-an-address', '0x1234', '0OIl0OIl0OIl0OIl0OIl0OIl0OIl0OIl']) {
      const bad = await t.client.get(`/relay/limits/${address}`);
      expect(bad.status).toBe(400);
      expect(bad.body.error).toBe('Bad Request');
    }
  });
});

describe('the simulation', () => {
  it('/relay/sim and /sim report what /relay charges, by the same fee code', async () => {
    const body = { api_url: target('base-sepolia').routes.paid.url, method: 'GET' };
    const sim = await t.client.post('/relay/sim', body);
    expect(sim.status).toBe(200);
    expect(sim.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: {
        network: 'base-sepolia',
        maxAmountRequired: PRICE.toString(),
        payTo: target('base-sepolia').routes.paid.payTo,
      },
      relayFeeBreakdown: {
        targetAmount: 0.012345,
        relayFee: 0.000371,
        totalAmount: 0.012716,
        relayFeePercentage: 3,
        relayFeeMinUSDC: 0,
        feeModel: 'flat 3% on top of the target amount',
      },
    });
    const alias = await t.client.post('/sim', body);
    expect(alias.body).toEqual(sim.body);
    const offered = (await unpaid(body)).body.accepts[0];
    expect(BigInt(offered.maxAmountRequired)).toBe(BigInt(Math.round(sim.body.relayFeeBreakdown.totalAmount * 1e6)));
    const free = await t.client.post('/relay/sim', { api_url: target('base-sepolia').routes.free.url, method: 'GET' });
    expect(free.body).toEqual({ requiresPayment: false, message: expect.any(String) });
  });
});

describe('a target that never charges', () => {
  it('402 after payment, and 5xx after payment: 502 with a record; the refund confirms on-chain and the client is whole again', async () => {
    const network = 'base-sepolia';
    const wallet = clientAddress(network);
    const before = {
      client: await peers.usdcBalance(network, wallet),
      service: await peers.usdcBalance(network, serviceAddress(network)),
    };
    target(network).reset();

    const never = await payingFetch(peers, network)(
      relayUrl(),
      relayRequest({ api_url: target(network).routes.neverSettles.url, method: 'GET' }),
    );
    expect(never.status).toBe(502);
    const neverBody = (await never.json()) as { webhook_id: string };
    expect(neverBody).toEqual({
      code: 'upstream_error',
      error: 'Bad Gateway',
      message: expect.stringContaining('Upstream refused payment after 2 attempts'),
      webhook_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(never.headers.get('x-service-webhook')).toBe(neverBody.webhook_id);
    expect(never.headers.get('x-client-payment')).toMatch(/^0x[0-9a-f]{64}$/);

    const failing = await payingFetch(peers, network)(
      relayUrl(),
      relayRequest({ api_url: target(network).routes.error.url, method: 'GET' }),
    );
    expect(failing.status).toBe(502);
    const failingBody = (await failing.json()) as { webhook_id: string; message: string };
    expect(failingBody.message).toMatch(/answered 500 after it was paid/);

    // The client paid twice; the target has charged nothing.
    expect(await peers.usdcBalance(network, wallet)).toBe(before.client - 2n * TOTAL);
    const pending = await t.client.get(`/webhooks/${neverBody.webhook_id}`);
    expect(pending.status).toBe(202);
    expect(pending.body).toMatchObject({ status: 'pending', relayTxId: expect.any(Number) });

    // Our authorization to the target lives WINDOW_SECONDS; a live chain would mine past it, the local one is asked to.
    await new Promise((resolve) => setTimeout(resolve, (WINDOW_SECONDS + 1) * 1000));
    await peers.evmChains[network]!.mineUntil(BigInt(Math.floor(Date.now() / 1000)));

    for (const id of [neverBody.webhook_id, failingBody.webhook_id]) {
      const record = await pollWebhook(t, id, 60_000);
      expect(record.status).toBe(200);
      expect(record.body).toEqual({
        status: 'refund_confirmed',
        txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/),
        network,
        method: 'direct',
        relayTxId: expect.any(Number),
        message: expect.stringContaining('Refund of 0.012716 USDC'),
        // Settled is not final: the refund is watched until it is FINALITY_DEPTH blocks deep.
        finality: expect.stringMatching(/^(pending|final)$/),
      });
      expect(await evmTransfers(network, record.body.txHash)).toEqual([
        { from: serviceAddress(network), to: wallet, value: TOTAL },
      ]);
    }
    expect(await peers.usdcBalance(network, wallet)).toBe(before.client);
    expect(await peers.usdcBalance(network, serviceAddress(network))).toBe(before.service);
    const rows = (await relayRows(db)).filter(
      (row) => row.webhook_id === neverBody.webhook_id || row.webhook_id === failingBody.webhook_id,
    );
    expect(rows.map((row) => row.state)).toEqual(['refunded', 'refunded']);
    const refunds = await db
      .selectFrom('refunds')
      .selectAll()
      .where(
        'relay_transaction_id',
        'in',
        rows.map((row) => row.id),
      )
      .execute();
    expect(refunds.map((refund) => refund.status)).toEqual(['confirmed', 'confirmed']);
  }, 180_000);
});

describe('with FACILITATOR_URL, the facilitator settles the client payments', () => {
  let viaFacilitator: TestService;
  beforeAll(async () => {
    viaFacilitator = await startProxyService(peers, { FACILITATOR_URL: peers.facilitator.url });
  });
  afterAll(async () => {
    await ifStarted(viaFacilitator)?.stop();
  });

  it('EVM and Solana clients pay through it (the Solana entry names its fee payer); the targets are paid', async () => {
    const url = `${viaFacilitator.service.url}/relay`;
    const body = { api_url: target('base-sepolia').routes.paid.url, method: 'GET' };
    const first = await viaFacilitator.client.post('/relay', body);
    expect(first.body.accepts.find((entry: PeerRequirements) => entry.network === 'solana-devnet').extra).toEqual({
      feePayer: peers.facilitator.solanaFeePayer,
    });
    const settledBefore = peers.facilitator.calls.filter((call) => call.path === '/settle').length;

    for (const network of ['base-sepolia', 'solana-devnet'] as const) {
      const payTo = target('base-sepolia').routes.paid.payTo;
      const before = await balances(network, 'base-sepolia', payTo);
      const res = await payingFetch(peers, network)(url, relayRequest(body));
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ route: 'paid', network: 'base-sepolia' });
      const after = await balances(network, 'base-sepolia', payTo);
      expect(after.client).toBe(before.client - TOTAL);
      expect(after.target).toBe(before.target + PRICE);
    }
    // Our two client payments and the targets' two settlements of our payments to them.
    const settles = peers.facilitator.calls.filter((call) => call.path === '/settle').slice(settledBefore);
    expect(
      settles
        .filter((call) => call.requirements.payTo === serviceAddress(call.network as NetworkName))
        .map((call) => call.network),
    ).toEqual(['base-sepolia', 'solana-devnet']);
  });
});
