// max_amount and the per-key policy against the local peers: a target asking more than the call's
// ceiling is refused with 422 price_above_limit before anything moves, on /proxy, /proxy/sim,
// /relay (unpaid and paid) and /relay/sim; a key's hard maximum and allowed hosts refuse with 403
// policy_refused, and hold exactly under 50 concurrent calls. Amounts are read from the chains.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { setKeyPolicy } from '../../payments/accounts/accounts';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { ledgerSums, startPeersAndProxyService } from '../support/proxy';
import { relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** ceil(12,345 x 1.03 / 1000) */
const CREDITS = 13n;
const CHEAP = 2_000n;
/** ceil(2,000 x 1.03 / 1000) */
const CHEAP_CREDITS = 3n;
const NETWORK = 'base-sepolia';

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE, paidEcho: CHEAP },
    targets: [
      { name: NETWORK, network: NETWORK },
      { name: 'other', network: NETWORK },
    ],
  }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const paidUrl = () => target().routes.paid.url;

async function chainBalances() {
  return {
    client: await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address),
    service: await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address),
    target: await peers.usdcBalance(NETWORK, target().routes.paid.payTo),
  };
}

async function untilPolicy(headers: Record<string, string>, done: (policy: any) => boolean) {
  const deadline = Date.now() + 2_000;
  for (;;) {
    const res = await t.client.get('/v1/credits/balance', { headers });
    if (done(res.body.policy) || Date.now() > deadline) return res;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function expectPriceAboveLimit(res: { status: number; body: any }, maxAmount: bigint): void {
  expect(res.status).toBe(422);
  expect(res.body).toMatchObject({
    code: 'price_above_limit',
    price: PRICE.toString(),
    max_amount: maxAmount.toString(),
    network: NETWORK,
  });
  expect(res.body.details).toContain(`${PRICE}`);
  expect(res.body.details).toContain(`${maxAmount}`);
}

describe('a ceiling below the price refuses with nothing moved', () => {
  const below = PRICE - 1n;

  it('/proxy and /proxy/sim: 422 naming the price and the ceiling; no credits held, nothing signed or paid', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = await chainBalances();
    target().reset();
    const headers = { 'x-api-key': key };
    const body = { api_url: paidUrl(), method: 'GET', max_amount: below.toString() };
    expectPriceAboveLimit(await t.client.post('/proxy', body, { headers }), below);
    expectPriceAboveLimit(await t.client.post('/proxy/sim', body, { headers }), below);
    // The target was asked its price, never paid.
    expect(target().requests.every((request) => request.payment === null)).toBe(true);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: 0n, charge: 0n });
    expect(await db.selectFrom('proxy_payments').selectAll().execute()).toEqual([]);
    expect(await chainBalances()).toEqual(before);

    // At the price exactly the call is paid.
    const paid = await t.client.post('/proxy', { ...body, max_amount: PRICE.toString() }, { headers });
    expect(paid.status).toBe(200);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - CREDITS);
  });

  it('/relay/sim and /relay without a payment: 422 instead of the 402 offer', async () => {
    const body = { api_url: paidUrl(), method: 'GET', max_amount: below.toString() };
    expectPriceAboveLimit(await t.client.post('/relay/sim', body), below);
    expectPriceAboveLimit(await t.client.post('/sim', body), below);
    expectPriceAboveLimit(await t.client.post('/relay', body), below);
  });

  it('/relay with a valid payment: 422 before it is verified, recorded or settled', async () => {
    const offer = await t.client.post('/relay', { api_url: paidUrl(), method: 'GET' });
    expect(offer.status).toBe(402);
    const { header } = await peers.signEvmPayment(offer.body.accepts[0] as PeerRequirements);
    const before = await chainBalances();
    const rowsBefore = (await relayRows(db)).length;
    const res = await t.client.post(
      '/relay',
      { api_url: paidUrl(), method: 'GET', max_amount: below.toString() },
      { headers: { 'X-PAYMENT': header } },
    );
    expectPriceAboveLimit(res, below);
    expect((await relayRows(db)).length).toBe(rowsBefore);
    expect(await chainBalances()).toEqual(before);
  });

  it('the unmodified x402-fetch with max_amount below the price pays nothing', async () => {
    const before = await chainBalances();
    const res = await peers.x402Fetch(NETWORK)(`${t.service.url}/relay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_url: paidUrl(), method: 'GET', max_amount: below.toString() }),
    });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { code: string }).code).toBe('price_above_limit');
    expect(await chainBalances()).toEqual(before);
  });
});

describe("a key's policy", () => {
  it('is shown by GET /v1/credits/balance, and refuses a host outside it and a price over its hard maximum with 403', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const headers = { 'x-api-key': account.key };
    const none = await t.client.get('/v1/credits/balance', { headers });
    expect(none.body.policy).toEqual({ default_max_amount: null, hard_max_amount: null, allowed_hosts: null });

    const allowedHost = new URL(target().url).host;
    await setKeyPolicy(db, account.prefix, {
      defaultMaxMicroUsdc: CHEAP - 1n,
      hardMaxMicroUsdc: PRICE - 1n,
      allowedHosts: [allowedHost],
    });
    // A key the service holds in memory takes its new policy once the change is announced: within moments.
    const shown = await untilPolicy(headers, (policy) => policy.hard_max_amount !== null);
    expect(shown.body.policy).toEqual({
      default_max_amount: (CHEAP - 1n).toString(),
      hard_max_amount: (PRICE - 1n).toString(),
      allowed_hosts: [allowedHost],
    });

    const other = peers.targets.other!;
    other.reset();
    for (const path of ['/proxy', '/proxy/sim']) {
      const res = await t.client.post(path, { api_url: other.routes.paid.url, method: 'GET' }, { headers });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe('policy_refused');
      expect(res.body.details).toContain(new URL(other.url).host);
    }
    // A host outside the policy is never called.
    expect(other.requests).toEqual([]);

    // Over the hard maximum, whatever max_amount says.
    const over = await t.client.post(
      '/proxy',
      { api_url: paidUrl(), method: 'GET', max_amount: '1000000' },
      { headers },
    );
    expect(over.status).toBe(403);
    expect(over.body.code).toBe('policy_refused');
    // Over the default maximum when the call names none: 422.
    const dear = await t.client.post(
      '/proxy',
      { api_url: target().routes.paidEcho.url, method: 'POST', json: {} },
      { headers },
    );
    expect(dear.status).toBe(422);
    expect(dear.body).toMatchObject({
      code: 'price_above_limit',
      price: CHEAP.toString(),
      max_amount: `${CHEAP - 1n}`,
    });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n);
  });

  it('holds exactly under 50 concurrent calls: only allowed, affordable calls are paid and charged', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    await setKeyPolicy(db, account.prefix, {
      defaultMaxMicroUsdc: null,
      hardMaxMicroUsdc: CHEAP,
      allowedHosts: [new URL(target().url).host],
    });
    const headers = { 'x-api-key': account.key };
    const cheapTo = target().routes.paidEcho.payTo;
    const before = {
      ...(await chainBalances()),
      cheapTarget: await peers.usdcBalance(NETWORK, cheapTo),
    };
    peers.targets.other!.reset();
    // 20 allowed at the cheap price, 10 over the hard maximum, 10 on a host not allowed, 10 under a ceiling below the price.
    const kinds = Array.from(
      { length: 50 },
      (_, index) => (['ok', 'ok', 'hard', 'host', 'ceiling'] as const)[index % 5]!,
    );
    const bodyOf = (kind: (typeof kinds)[number]) => {
      switch (kind) {
        case 'ok':
          return { api_url: target().routes.paidEcho.url, method: 'POST', json: { n: 1 } };
        case 'hard':
          return { api_url: paidUrl(), method: 'GET', max_amount: '1000000' };
        case 'host':
          return { api_url: peers.targets.other!.routes.paidEcho.url, method: 'POST', json: { n: 1 } };
        case 'ceiling':
          return { api_url: target().routes.paidEcho.url, method: 'POST', json: { n: 1 }, max_amount: '1999' };
      }
    };
    const answers = await Promise.all(kinds.map((kind) => t.client.post('/proxy', bodyOf(kind), { headers })));
    const statuses = answers.map((res, index) => `${kinds[index]}:${res.status}:${res.body?.code ?? ''}`);
    expect(statuses.filter((s) => s === 'ok:200:')).toHaveLength(20);
    expect(statuses.filter((s) => s === 'hard:403:policy_refused')).toHaveLength(10);
    expect(statuses.filter((s) => s === 'host:403:policy_refused')).toHaveLength(10);
    expect(statuses.filter((s) => s === 'ceiling:422:price_above_limit')).toHaveLength(10);

    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - 20n * CHEAP_CREDITS);
    expect(await ledgerSums(db, account.organisationId)).toEqual({
      grant: 1_000n,
      reserve: 20n * CHEAP_CREDITS,
      charge: 20n * CHEAP_CREDITS,
      release: 0n,
      refund: 0n,
    });
    expect(await peers.usdcBalance(NETWORK, cheapTo)).toBe(before.cheapTarget + 20n * CHEAP);
    expect(await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address)).toBe(before.service - 20n * CHEAP);
    expect(peers.targets.other!.requests).toEqual([]);
  });
});
