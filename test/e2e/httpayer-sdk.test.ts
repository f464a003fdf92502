// HTTPayer's Python SDK as a client of the service, against the local peers: exactly the bodies,
// headers, authorization window and 402 retry loop it sends (test/support/httpayer-sdk.ts), with
// every answer checked against the document and every amount read from the chains.
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { callTimeoutMs } from '../../handlers/targetReply';
import { organisationBalance } from '../../payments/accounts/credits';
import type { Peers } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import { HttpayerSdkClient, type SdkOptions } from '../support/httpayer-sdk';
import { expectChargedOnce, ledgerSums, startPeersAndProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** What the relay asks: ceil(12,345 x 1.03) = ceil(12,715.35). */
const RELAY_TOTAL = 12_716n;
/** What the proxy charges: ceil(12,715.35 / 1000) credits. */
const CREDITS = 13n;
const NETWORK = 'base';

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: [NETWORK, 'solana'],
    pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE, slow: null },
  }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const service = () => peers.wallets.service.evm.address;

async function sdk(options: Omit<SdkOptions, 'routerUrl'>): Promise<HttpayerSdkClient> {
  const client = new HttpayerSdkClient({ routerUrl: t.service.url, ...options });
  const config = await client.loadConfig();
  expect(config.status).toBe(200);
  return client;
}

/** A wallet of its own per test, funded with `microUsdc`, so its balance tells exactly what it paid. */
async function relayWallet(microUsdc: bigint) {
  const privateKey = generatePrivateKey();
  const address = privateKeyToAccount(privateKey).address;
  if (microUsdc > 0n) await peers.mint(NETWORK, address, microUsdc);
  return { privateKey, address };
}

async function balances(client: string) {
  return {
    client: await peers.usdcBalance(NETWORK, client),
    service: await peers.usdcBalance(NETWORK, service()),
    target: await peers.usdcBalance(NETWORK, target().routes.paid.payTo),
  };
}

async function relayRowsOf(payer: string) {
  return db
    .selectFrom('relay_transactions')
    .select(['nonce_key', 'state', 'amount_micro'])
    .where('payer', '=', payer)
    .orderBy('id')
    .execute();
}

describe('GET /config as the SDK reads it', () => {
  it('networks.v1 lists the enabled networks and every name the interface accepts for Solana', async () => {
    const client = await sdk({ apiKey: 'unused' });
    expect(client.supportedNetworks).toEqual([NETWORK, 'solana', 'solana-mainnet', 'solana-mainnet-beta']);
    // The SDK refuses a network missing from networks.v1 before sending anything.
    for (const name of ['solana', 'solana-mainnet', 'solana-mainnet-beta', NETWORK])
      expect(() => client.validateNetwork(name)).not.toThrow();
    expect(() => client.validateNetwork('base-sepolia')).toThrow(/Unsupported network/);
  });
});

describe('POST /relay paid by the SDK (EVM)', () => {
  it('pays once with its own authorization window; the chain moves exactly the price and the fee', async () => {
    const wallet = await relayWallet(1_000_000n);
    const client = await sdk({ privateKey: wallet.privateKey });
    const before = await balances(wallet.address);
    const startedAt = Math.floor(Date.now() / 1000);

    const res = await client.payInvoice({ method: 'GET', url: target().routes.paid.url });

    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'paid', target: NETWORK, network: NETWORK });
    expect(res.headers.get('x-client-payment')).toMatch(/^0x[0-9a-f]{64}$/);
    // One attempt of the loop: the service never answered 402 after taking the payment.
    expect(client.attempts).toHaveLength(1);
    const authorization = client.attempts[0]!.payment!.payload.authorization;
    expect(Number(authorization.validAfter)).toBeGreaterThanOrEqual(startedAt - 60);
    expect(Number(authorization.validAfter)).toBeLessThanOrEqual(startedAt - 59 + 5);
    expect(authorization).toMatchObject({ from: wallet.address, to: service(), value: RELAY_TOTAL.toString() });
    expect(await balances(wallet.address)).toEqual({
      client: before.client - RELAY_TOTAL,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
    expect(await relayRowsOf(wallet.address)).toEqual([
      { nonce_key: authorization.nonce.toLowerCase(), state: 'delivered', amount_micro: RELAY_TOTAL },
    ]);
  });

  it('a refused payment is a 402 that moved nothing; the resend 1 s later with a fresh authorization is the only charge', async () => {
    // Short of USDC on the first attempt; funded before the SDK's resend. Real 1 s spacing.
    const wallet = await relayWallet(0n);
    const before = await balances(wallet.address);
    const client = await sdk({
      privateKey: wallet.privateKey,
      onAttempt: async (attempt) => {
        if (attempt.status === 402 && attempt.index === 0) {
          expect(await balances(wallet.address)).toEqual(before);
          await peers.mint(NETWORK, wallet.address, RELAY_TOTAL);
        }
      },
    });
    const started = performance.now();

    const res = await client.payInvoice({ method: 'GET', url: target().routes.paid.url });

    expect(res.status).toBe(200);
    expect(client.attempts.map((attempt) => attempt.status)).toEqual([402, 200]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(1_000);
    const [first, second] = client.attempts.map((attempt) => attempt.payment!.payload.authorization.nonce);
    expect(first).not.toBe(second);
    expect(await balances(wallet.address)).toEqual({
      client: 0n,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
    // Only the paid attempt left a row; the refused one was stopped before anything was recorded.
    expect(await relayRowsOf(wallet.address)).toEqual([
      { nonce_key: second!.toLowerCase(), state: 'delivered', amount_micro: RELAY_TOTAL },
    ]);
  });

  it('a payment refused every time: five attempts, each with a fresh authorization, and nothing moves', async () => {
    const wallet = await relayWallet(0n);
    const client = await sdk({ privateKey: wallet.privateKey, retryDelayMs: 10 });
    const before = await balances(wallet.address);

    const res = await client.payInvoice({ method: 'GET', url: target().routes.paid.url });

    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/insufficient_funds/);
    expect(client.attempts.map((attempt) => attempt.status)).toEqual([402, 402, 402, 402, 402]);
    expect(new Set(client.attempts.map((attempt) => attempt.payment!.payload.authorization.nonce)).size).toBe(5);
    expect(await balances(wallet.address)).toEqual(before);
    expect(await relayRowsOf(wallet.address)).toEqual([]);
  });

  it('?format=json wraps the answer in {success, result}; paid once', async () => {
    const wallet = await relayWallet(1_000_000n);
    const client = await sdk({ privateKey: wallet.privateKey, responseMode: 'json', retryDelayMs: 10 });
    const before = await balances(wallet.address);

    const res = await client.payInvoice({
      method: 'POST',
      url: target().routes.paidEcho.url,
      payload: { city: 'Lisbon' },
    });

    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ success: true, result: { method: 'POST', contentType: 'application/json' } });
    expect(JSON.parse(res.body.result.body)).toEqual({ city: 'Lisbon' });
    expect(client.attempts).toHaveLength(1);
    expect(await balances(wallet.address)).toEqual({
      client: before.client - RELAY_TOTAL,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
  });
});

describe('POST /relay paid by the SDK (Solana)', () => {
  it('a legacy transaction, sent once without a retry loop: the chain moves exactly the price and the fee', async () => {
    const solanaTarget = peers.targets.solana!;
    const client = await sdk({ solana: { signer: peers.wallets.client.solana.signer, rpcUrl: peers.rpcUrls.solana! } });
    const owners = {
      client: peers.wallets.client.solana.address,
      service: peers.wallets.service.solana.address,
      target: solanaTarget.routes.paid.payTo,
    };
    const read = async () => ({
      client: await peers.usdcBalance('solana', owners.client),
      service: await peers.usdcBalance('solana', owners.service),
      target: await peers.usdcBalance('solana', owners.target),
    });
    const before = await read();

    const res = await client.payInvoice({ method: 'GET', url: solanaTarget.routes.paid.url });

    expect({ status: res.status, body: res.status === 200 ? undefined : res.body }).toEqual({
      status: 200,
      body: undefined,
    });
    expect(res.body).toEqual({ ok: true, route: 'paid', target: 'solana', network: 'solana' });
    expect(client.attempts.map((attempt) => attempt.status)).toEqual([402, 200]);
    expect(await read()).toEqual({
      client: before.client - RELAY_TOTAL,
      service: before.service + RELAY_TOTAL - PRICE,
      target: before.target + PRICE,
    });
  });
});

describe('POST /proxy and /proxy/sim called by the SDK', () => {
  it('timeout 600 (the SDK default) is capped, not refused: the call is paid and charged once', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const client = await sdk({ apiKey: key });
    const payTo = target().routes.paid.payTo;
    const before = {
      service: await peers.usdcBalance(NETWORK, service()),
      target: await peers.usdcBalance(NETWORK, payTo),
    };

    const res = await client.payInvoice({ method: 'GET', url: target().routes.paid.url, params: { city: 'Lisbon' } });

    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ok: true, route: 'paid', target: NETWORK, network: NETWORK });
    expect(await peers.usdcBalance(NETWORK, service())).toBe(before.service - PRICE);
    expect(await peers.usdcBalance(NETWORK, payTo)).toBe(before.target + PRICE);
    await expectChargedOnce(db, organisationId, CREDITS);
  });

  it('the capped timeout still yields to a shorter X-TIMEOUT, and a null timeout counts as none', async () => {
    const { key } = await createTestAccount(db, { credits: 100n });
    const slow = `${target().routes.slow.url}?delayMs=3000`;
    // The 502 naming 300 ms says which bound cut the call (the target would have answered 200 after 3 s).
    const res = await t.client.post(
      '/proxy',
      { api_url: slow, method: 'GET', timeout: 600 },
      { headers: { 'x-api-key': key, 'x-timeout': '300' } },
    );
    expect(res.status).toBe(502);
    expect(res.body.details).toMatch(/within 300 ms/);
    const free = await t.client.post(
      '/proxy',
      { api_url: target().routes.free.url, method: 'GET', timeout: null },
      { headers: { 'x-api-key': key } },
    );
    expect(free.status).toBe(200);
    expect(callTimeoutMs(600, undefined, 30_000)).toBe(120_000);
    expect(callTimeoutMs(600, '300', 30_000)).toBe(300);
    expect(callTimeoutMs(null, undefined, 30_000)).toBe(30_000);
  });

  it('?format=json wraps a paid answer as /relay does, and a target error with its status', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const client = await sdk({ apiKey: key, responseMode: 'json' });

    const paid = await client.payInvoice({ method: 'GET', url: target().routes.paid.url });
    expect(paid.status).toBe(200);
    expect(paid.headers.get('content-type')).toMatch(/^application\/json/);
    expect(paid.body).toEqual({
      success: true,
      result: { ok: true, route: 'paid', target: NETWORK, network: NETWORK },
    });
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - CREDITS);

    const missing = await client.payInvoice({ method: 'GET', url: `${target().url}/missing` });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ success: false, status: 404, result: expect.anything() });

    const free = await client.payInvoice({ method: 'GET', url: target().routes.free.url });
    expect(free.body).toEqual({
      success: true,
      result: { ok: true, route: 'free', target: NETWORK, network: NETWORK },
    });
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - CREDITS);
  });

  it('/proxy/sim accepts and ignores timeout (and ?format=json): nothing is paid or charged', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await peers.usdcBalance(NETWORK, service());
    for (const responseMode of ['text', 'json'] as const) {
      const client = await sdk({ apiKey: key, responseMode });
      const res = await client.simulate({ method: 'GET', url: target().routes.paid.url });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        requiresPayment: true,
        status: 402,
        paymentRequirements: { network: NETWORK, maxAmountRequired: PRICE.toString() },
        feeBreakdown: { totalCredits: Number(CREDITS) },
      });
    }
    expect(await peers.usdcBalance(NETWORK, service())).toBe(before);
    expect(await ledgerSums(db, organisationId)).toEqual({
      grant: 1_000n,
      reserve: 0n,
      charge: 0n,
      release: 0n,
      refund: 0n,
    });
  });
});
