// Retries after a lost answer (docs/decisions.md, Idempotency-Key and repeated payments): POST
// /proxy and /relay over HTTP against the local peers. The same key (or, on /relay, the same
// payment) for the same request gets the first call's answer byte for byte and moves no money; a
// repeat while the first call runs is a 409 with Retry-After; the same key with another request
// is a 422. Every response is checked against the document; every amount is read from the chain.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import type { PaymentRequirements as PeerRequirements, Peers } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import type { ContractResponse } from '../support/contract';
import { expectChargedOnce, ledgerSums, startPeersAndProxyService } from '../support/proxy';
import { relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 12_345n;
/** /proxy: ceil(12,345 x 1.03 / 1000) credits. */
const CREDITS = 13n;
/** /relay: ceil(12,345 x 1.03) micro-USDC. */
const TOTAL = 12_716n;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({
    networks: [NETWORK],
    pricesMicroUsdc: { paid: PRICE, paidEcho: PRICE, slow: PRICE },
  }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;
const usdc = (address: string) => peers.usdcBalance(NETWORK, address);

/** Requests of the target's route that carried our payment. */
const paidRequests = (route: string) =>
  target().requests.filter((request) => request.route === route && request.payment !== null).length;

function proxy(apiKey: string, body: unknown, headers: Record<string, string> = {}) {
  return t.client.post('/proxy', body, { headers: { 'x-api-key': apiKey, ...headers } });
}

function relay(body: unknown, headers: Record<string, string> = {}) {
  return t.client.post('/relay', body, { headers });
}

async function offer(body: unknown): Promise<PeerRequirements> {
  const res = await relay(body);
  expect(res.status).toBe(402);
  return res.body.accepts[0] as PeerRequirements;
}

/** The answer as the client read it: status, our headers that describe the call, and the bytes. */
function seen(res: ContractResponse) {
  return {
    status: res.status,
    contentType: res.headers.get('content-type'),
    xPaymentResponse: res.headers.get('x-payment-response'),
    xClientPayment: res.headers.get('x-client-payment'),
    webhook: res.headers.get('x-service-webhook'),
    text: res.text,
  };
}

const paidBody = () => ({ api_url: target().routes.paid.url, method: 'GET' });
const slowBody = (delayMs: number) => ({ api_url: `${target().routes.slow.url}?delayMs=${delayMs}`, method: 'GET' });

describe('Idempotency-Key on /proxy', () => {
  it('the same key twice: the same answer byte for byte, one payment on chain, one charge in credits', async () => {
    const { key: apiKey, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = { service: await usdc(service()), paid: paidRequests('paid') };
    const idempotencyKey = randomUUID();

    const first = await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey });
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey });

    expect(seen(again)).toEqual(seen(first));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(decodePaymentResponseHeader(again.headers.get('x-payment-response'))).toMatchObject({
      ok: true,
      value: { success: true, network: NETWORK },
    });
    expect(paidRequests('paid') - before.paid).toBe(1);
    expect(await usdc(service())).toBe(before.service - PRICE);
    await expectChargedOnce(db, organisationId, CREDITS);
  });

  it('the same key with another body is a 422 and nothing is paid; another account may use the same key', async () => {
    const { key: apiKey, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const idempotencyKey = randomUUID();
    expect((await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey })).status).toBe(200);
    const before = { service: await usdc(service()), paid: paidRequests('paid') };

    const other = await proxy(
      apiKey,
      { ...paidBody(), headers: { 'x-other': '1' } },
      { 'Idempotency-Key': idempotencyKey },
    );
    expect(other.status).toBe(422);
    expect(other.body).toEqual({
      code: 'idempotency_key_reused',
      error: 'Unprocessable Content',
      details: expect.stringContaining('another request'),
    });
    // format=json is another request too.
    const formatted = await t.client.post('/proxy?format=json', paidBody(), {
      headers: { 'x-api-key': apiKey, 'Idempotency-Key': idempotencyKey },
    });
    expect(formatted.status).toBe(422);
    expect(paidRequests('paid')).toBe(before.paid);
    expect(await usdc(service())).toBe(before.service);
    expect((await ledgerSums(db, organisationId)).charge).toBe(CREDITS);

    // Keys are per account: the same key of another account is its own call.
    const otherAccount = await createTestAccount(db, { credits: 1_000n });
    const theirs = await proxy(otherAccount.key, paidBody(), { 'Idempotency-Key': idempotencyKey });
    expect(theirs.status).toBe(200);
    expect(theirs.headers.get('idempotent-replayed')).toBeNull();
    expect((await ledgerSums(db, otherAccount.organisationId)).charge).toBe(CREDITS);
  });

  it('a repeat while the first call runs is a 409 with Retry-After; after it, the first answer', async () => {
    const { key: apiKey, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const idempotencyKey = randomUUID();
    const body = slowBody(1_500);
    const first = proxy(apiKey, body, { 'Idempotency-Key': idempotencyKey });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const during = await proxy(apiKey, body, { 'Idempotency-Key': idempotencyKey });
    expect(during.status).toBe(409);
    expect(during.headers.get('retry-after')).toBe('2');
    expect(during.body).toEqual({
      code: 'idempotency_in_progress',
      error: 'Conflict',
      details: expect.stringContaining('still running'),
    });
    const firstAnswer = await first;
    expect(firstAnswer.status).toBe(200);
    const after = await proxy(apiKey, body, { 'Idempotency-Key': idempotencyKey });
    expect(seen(after)).toEqual(seen(firstAnswer));
    expect(await ledgerSums(db, organisationId)).toMatchObject({ reserve: CREDITS, charge: CREDITS, release: 0n });
  });

  it('a key that is too long or has spaces is a 400 and nothing runs', async () => {
    const { key: apiKey, organisationId } = await createTestAccount(db, { credits: 1_000n });
    for (const bad of ['x'.repeat(256), 'two words']) {
      const res = await proxy(apiKey, paidBody(), { 'Idempotency-Key': bad });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: 'validation_failed', details: expect.stringMatching(/idempotency-key/i) });
    }
    expect((await ledgerSums(db, organisationId)).reserve).toBe(0n);
  });

  it('an answer that moved nothing is not kept: after a top-up, the same key runs the call', async () => {
    const { key: apiKey, organisationId } = await createTestAccount(db, { credits: 5n });
    const idempotencyKey = randomUUID();
    const short = await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey });
    expect(short.status).toBe(402);
    expect(short.body.code).toBe('insufficient_credits');
    await db
      .insertInto('credit_ledger')
      .values({ organisation_id: organisationId, kind: 'grant', amount_credits: 100n, reference: 'top-up' })
      .execute();
    await db
      .updateTable('organisations')
      .set((eb) => ({ credit_balance: eb('credit_balance', '+', 100n) }))
      .where('id', '=', organisationId)
      .execute();
    const paid = await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey });
    expect(paid.status).toBe(200);
    expect(paid.headers.get('idempotent-replayed')).toBeNull();
    // That answer moved money: it is kept.
    const again = await proxy(apiKey, paidBody(), { 'Idempotency-Key': idempotencyKey });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(seen(again)).toEqual(seen(paid));
    expect((await ledgerSums(db, organisationId)).charge).toBe(CREDITS);
  });
});

describe('a repeated payment on /relay', () => {
  it('the same X-PAYMENT for the same request: the first answer byte for byte, one payment each way', async () => {
    const { header, payment } = await peers.signEvmPayment(await offer(paidBody()));
    const before = {
      client: await usdc(client()),
      target: await usdc(target().routes.paid.payTo),
      paid: paidRequests('paid'),
    };
    const first = await relay(paidBody(), { 'X-PAYMENT': header });
    expect(first.status).toBe(200);
    const again = await relay(paidBody(), { 'x-payment': header });
    expect(seen(again)).toEqual(seen(first));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('x-client-payment')).toMatch(/^0x[0-9a-f]{64}$/);

    expect(await usdc(client())).toBe(before.client - TOTAL);
    expect(await usdc(target().routes.paid.payTo)).toBe(before.target + PRICE);
    expect(paidRequests('paid') - before.paid).toBe(1);
    const rows = (await relayRows(db)).filter(
      (row) => row.nonce_key === payment.payload.authorization.nonce.toLowerCase(),
    );
    expect(rows.map((row) => row.state)).toEqual(['delivered']);
  });

  it('the same X-PAYMENT for another request is refused as already used; nothing moves', async () => {
    const { header } = await peers.signEvmPayment(await offer(paidBody()));
    const first = await relay(paidBody(), { 'X-PAYMENT': header });
    expect(first.status).toBe(200);
    const before = await usdc(client());
    const other = await relay({ ...paidBody(), headers: { 'x-other': '1' } }, { 'X-PAYMENT': header });
    expect(other.status).toBe(400);
    expect(other.body).toMatchObject({
      code: 'payment_reused',
      details: expect.stringContaining('nonce was already used'),
    });
    // The refusal is not kept in the first call's place: its own request still gets its answer.
    expect(seen(await relay(paidBody(), { 'X-PAYMENT': header }))).toEqual(seen(first));
    expect(await usdc(client())).toBe(before);
  });

  it('the same X-PAYMENT while the first call runs: 409 with Retry-After, then the first answer', async () => {
    const body = slowBody(1_500);
    const { header } = await peers.signEvmPayment(await offer(body));
    const before = await usdc(client());
    const first = relay(body, { 'X-PAYMENT': header });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const during = await relay(body, { 'X-PAYMENT': header });
    expect(during.status).toBe(409);
    expect(during.headers.get('retry-after')).toBe('2');
    expect(during.body).toMatchObject({
      code: 'idempotency_in_progress',
      details: expect.stringContaining('X-PAYMENT'),
    });
    const firstAnswer = await first;
    expect(firstAnswer.status).toBe(200);
    expect(seen(await relay(body, { 'X-PAYMENT': header }))).toEqual(seen(firstAnswer));
    expect(await usdc(client())).toBe(before - TOTAL);
  });

  it('with an Idempotency-Key, a retry that signed a new payment gets the first answer and the new one is never taken', async () => {
    const idempotencyKey = randomUUID();
    const requirements = await offer(paidBody());
    const before = { client: await usdc(client()), paid: paidRequests('paid') };
    const first = await relay(paidBody(), {
      'X-PAYMENT': (await peers.signEvmPayment(requirements)).header,
      'Idempotency-Key': idempotencyKey,
    });
    expect(first.status).toBe(200);
    const retried = await relay(paidBody(), {
      'X-PAYMENT': (await peers.signEvmPayment(requirements)).header,
      'Idempotency-Key': idempotencyKey,
    });
    expect(seen(retried)).toEqual(seen(first));
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(await usdc(client())).toBe(before.client - TOTAL);
    expect(paidRequests('paid') - before.paid).toBe(1);

    // A payment in the payer's name that would not pay (signed over another domain) learns nothing.
    const forged = await relay(paidBody(), {
      'X-PAYMENT': (await peers.signEvmPayment(requirements, { domain: { chainId: 1 } })).header,
      'Idempotency-Key': idempotencyKey,
    });
    expect(forged.status).toBe(402);
    expect(forged.body.code).toBe('payment_invalid');
    expect(forged.headers.get('idempotent-replayed')).toBeNull();

    // The same key and payer with another request: 422, nothing moves.
    const other = await relay(
      { ...paidBody(), headers: { 'x-other': '1' } },
      { 'X-PAYMENT': (await peers.signEvmPayment(requirements)).header, 'Idempotency-Key': idempotencyKey },
    );
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('idempotency_key_reused');
    expect(await usdc(client())).toBe(before.client - TOTAL);
  });
});
