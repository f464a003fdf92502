// The x402 version 2 extensions (docs/decisions.md, "x402 extensions"), against the local peers:
// payment-identifier from clients (@x402/fetch 2.27 with @x402/extensions' client step) on /relay
// and /llm/chat, meaning what Idempotency-Key means; our own id sent to a target that declares
// the extension (an unmodified @x402/express 2.27 target with @x402/extensions' server support,
// idempotent by it); a target's bazaar metadata in the dry runs; unknown extensions ignored and
// echoed; and settlement_pending (a target whose facilitator's settlement is still under way)
// followed by the jobs to the end, the money read from the chain. Every response of the service is
// checked against the document.
import { randomUUID } from 'node:crypto';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload } from '@x402/core/types';
import {
  appendPaymentIdentifierToExtensions,
  declarePaymentIdentifierExtension,
  PAYMENT_IDENTIFIER,
} from '@x402/extensions/payment-identifier';
import { wrapFetchWithPayment } from '@x402/fetch';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { createTestAccount } from '../support/accounts';
import { expectChargedOnce, llmEnv, peersEnv, pollWebhook } from '../support/proxy';
import { contractFetch } from '../support/relay';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base' as const;
const PRICE = 10_000n;
/** /relay: ceil(10,000 x 1.03). */
const RELAY_PRICE = 10_300n;
/** /proxy: ceil(10,000 x 1.03 / 1000) credits. */
const CREDITS = 11n;
/** LLM_PRICE_USDC 0.01. */
const CHAT_PRICE = 10_000n;
const UNKNOWN_EXTENSION = { info: { note: 'an extension no client knows' }, schema: { type: 'object' } };

let peers: Peers;
let llm: LocalLlm;
let t: TestService;
let db: Db;

beforeAll(async () => {
  [peers, llm] = await Promise.all([
    startPeers({
      networks: [NETWORK],
      // Held settlements are released by the tests, once they have seen them pending.
      pendingSettlementReleaseMs: 600_000,
      targets: [
        { name: 'plain', network: NETWORK, x402Version: 2 },
        {
          name: 'ext',
          network: NETWORK,
          x402Version: 2,
          v2Extensions: { paymentIdentifier: true, bazaar: true, other: { 'x-unknown': UNKNOWN_EXTENSION } },
        },
        { name: 'pending', network: NETWORK, x402Version: 2, settlementPending: true },
      ],
    }),
    startLocalLlm(),
  ]);
  t = await startTestService({ ...peersEnv(peers), ...llmEnv(llm) });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

const usdc = (address: string) => peers.usdcBalance(NETWORK, address);
const service = () => peers.wallets.service.evm.address;
const target = (name: string) => peers.targets[name]!;
const paidRequests = (name: string, route = 'paid') =>
  target(name).requests.filter((request) => request.route === route && request.payment !== null);
const relayBody = (name: string, route: 'paid' | 'neverSettles' = 'paid') => ({
  api_url: target(name).routes[route].url,
  method: 'GET',
});
const chatBody = (text: string) => ({ messages: [{ role: 'user', content: text }] });

function decoded(header: string | null): any {
  expect(header).toMatch(/^[A-Za-z0-9+/]+={0,2}$/);
  return JSON.parse(Buffer.from(header!, 'base64').toString('utf8'));
}

/** A funded payer, and @x402/fetch 2.27 paying as it; with `id`, @x402/extensions' client step adds that payment id. */
async function payer(id?: string, to: () => TestService = () => t) {
  const privateKey = generatePrivateKey();
  const account = privateKeyToAccount(privateKey);
  await peers.mint(NETWORK, account.address, 1_000_000n);
  const client = x402ClientV2(account);
  if (id !== undefined)
    client.onBeforePaymentCreation(({ paymentRequired }) => {
      if (paymentRequired.extensions) appendPaymentIdentifierToExtensions(paymentRequired.extensions, id);
      return Promise.resolve();
    });
  const paying = wrapFetchWithPayment(contractFetch(), client);
  return {
    address: account.address,
    client,
    pay: (path: string, body: unknown, headers: Record<string, string> = {}) =>
      paying(`${to().service.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      }),
  };
}

/**
 * A PAYMENT-SIGNATURE for our 402 of `path`, built by @x402/core's client as the payer, with
 * `extensions` then set as given (to send what no standard client would).
 */
async function paymentSignature(
  path: string,
  body: unknown,
  from: Awaited<ReturnType<typeof payer>>,
  extensions: (declared: Record<string, unknown>) => Record<string, unknown>,
): Promise<string> {
  const first = await t.client.post(path, body);
  expect(first.status).toBe(402);
  const required = decodePaymentRequiredHeader(first.headers.get('payment-required')!);
  const payment: PaymentPayload = await from.client.createPaymentPayload(required);
  return encodePaymentSignatureHeader({ ...payment, extensions: extensions(payment.extensions ?? {}) });
}

describe('payment-identifier from clients', () => {
  it('/relay: the 402 declares it; a repeat under the same id gets the recorded answer and never pays twice, also with an unknown extension beside it', async () => {
    const id = `pay_${randomUUID().replace(/-/g, '')}`;
    const first = await t.client.post('/relay', relayBody('plain'));
    expect(first.status).toBe(402);
    expect(decodePaymentRequiredHeader(first.headers.get('payment-required')!).extensions).toEqual({
      [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false),
    });

    const client = await payer(id);
    const before = { client: await usdc(client.address), paid: paidRequests('plain').length };
    const answer = await client.pay('/relay', relayBody('plain'));
    expect(answer.status).toBe(200);
    const text = await answer.text();
    expect(JSON.parse(text)).toMatchObject({ ok: true, route: 'paid' });
    expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);

    // The client lost the answer and pays again under the same id: a new authorization, never taken.
    const again = await client.pay('/relay', relayBody('plain'));
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(text);
    // The same id with an extension no one knows beside it: still the same key, still replayed.
    const withUnknown = await paymentSignature('/relay', relayBody('plain'), client, (declared) => ({
      ...declared,
      'x-client-only': { info: { anything: [1, 2, 3] } },
    }));
    const third = await t.client.post('/relay', relayBody('plain'), { headers: { 'PAYMENT-SIGNATURE': withUnknown } });
    expect(third.status).toBe(200);
    expect(third.headers.get('idempotent-replayed')).toBe('true');

    expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);
    expect(paidRequests('plain').length - before.paid).toBe(1);
  });

  it('/relay: an id and an Idempotency-Key that differ are a 400, as is a malformed id; nothing moves', async () => {
    const client = await payer();
    const id = `pay_${randomUUID().replace(/-/g, '')}`;
    const withId = await paymentSignature('/relay', relayBody('plain'), client, (declared) => {
      appendPaymentIdentifierToExtensions(declared, id);
      return declared;
    });
    const malformed = await paymentSignature('/relay', relayBody('plain'), client, (declared) => ({
      ...declared,
      [PAYMENT_IDENTIFIER]: { info: { required: false, id: 'too-short' } },
    }));
    const before = { client: await usdc(client.address), paid: paidRequests('plain').length };

    const differ = await t.client.post('/relay', relayBody('plain'), {
      headers: { 'PAYMENT-SIGNATURE': withId, 'Idempotency-Key': randomUUID() },
    });
    expect(differ.status).toBe(400);
    expect(differ.body).toMatchObject({ code: 'validation_failed', details: expect.stringContaining('differ') });
    const bad = await t.client.post('/relay', relayBody('plain'), { headers: { 'PAYMENT-SIGNATURE': malformed } });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'validation_failed', details: expect.stringContaining('16 to 128') });
    expect(await usdc(client.address)).toBe(before.client);
    expect(paidRequests('plain').length).toBe(before.paid);

    // The same value in both is one key: the call runs.
    const agree = await t.client.post('/relay', relayBody('plain'), {
      headers: { 'PAYMENT-SIGNATURE': withId, 'Idempotency-Key': id },
    });
    expect(agree.status).toBe(200);
    expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);
  });

  it('/llm/chat: the same id twice answers once and charges once; another request under it is a 422', async () => {
    const id = `chat_${randomUUID().replace(/-/g, '')}`;
    const first = await t.client.post('/llm/chat', chatBody('hello'));
    expect(first.status).toBe(402);
    expect(decodePaymentRequiredHeader(first.headers.get('payment-required')!).extensions).toEqual({
      [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false),
    });
    const client = await payer(id);
    const before = await usdc(client.address);

    const answer = await client.pay('/llm/chat', chatBody('hello once'));
    expect(answer.status).toBe(200);
    const text = await answer.text();
    const again = await client.pay('/llm/chat', chatBody('hello once'));
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.text()).toBe(text);
    expect(await usdc(client.address)).toBe(before - CHAT_PRICE);

    const other = await client.pay('/llm/chat', chatBody('another question'));
    expect(other.status).toBe(422);
    expect(((await other.json()) as { code: string }).code).toBe('idempotency_key_reused');
    // An Idempotency-Key that differs from the id is refused before anything is verified.
    const differ = await client.pay('/llm/chat', chatBody('hello once'), { 'Idempotency-Key': randomUUID() });
    expect(differ.status).toBe(400);
    expect(await usdc(client.address)).toBe(before - CHAT_PRICE);
  });
});

describe('payment-identifier to targets, bazaar and unknown extensions of a target', () => {
  it('/proxy sends our id to a target that declares it, echoing its other extensions; the payment sent again is answered, not paid again', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = { service: await usdc(service()), target: await usdc(target('ext').routes.paid.payTo) };
    const res = await t.client.post('/proxy', relayBody('ext'), { headers: { 'x-api-key': key } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ ok: true, route: 'paid' });

    const [sent] = paidRequests('ext').slice(-1);
    const payment = decoded(sent!.payment);
    const id = payment.extensions[PAYMENT_IDENTIFIER].info.id as string;
    expect(id).toMatch(/^prs_[0-9a-f]{40}$/);
    expect(target('ext').paymentIds.at(-1)).toBe(id);
    // The target's declarations echoed: payment-identifier with our id, the rest verbatim.
    const required = decodePaymentRequiredHeader(
      (await fetch(target('ext').routes.paid.url)).headers.get('payment-required')!,
    );
    expect(payment.extensions).toEqual({
      ...required.extensions,
      [PAYMENT_IDENTIFIER]: { ...required.extensions![PAYMENT_IDENTIFIER]!, info: { required: false, id } },
    });
    expect(payment.extensions['x-unknown']).toEqual(UNKNOWN_EXTENSION);

    // Our payment sent again (as a retry of ours would send it): the target answers it from its
    // record of that id, and nothing is paid twice.
    const retried = await fetch(target('ext').routes.paid.url, { headers: { 'PAYMENT-SIGNATURE': sent!.payment! } });
    expect(retried.status).toBe(200);
    expect(await retried.json()).toMatchObject({ ok: true, route: 'paid' });
    expect(await usdc(service())).toBe(before.service - PRICE);
    expect(await usdc(target('ext').routes.paid.payTo)).toBe(before.target + PRICE);
    await expectChargedOnce(db, organisationId, CREDITS);
  });

  it('our retries of one payment carry the same id (a target that keeps refusing it)', async () => {
    const { key } = await createTestAccount(db, { credits: 1_000n });
    const before = paidRequests('ext', 'neverSettles').length;
    const res = await t.client.post('/proxy', relayBody('ext', 'neverSettles'), { headers: { 'x-api-key': key } });
    expect(res.status).toBe(502);
    const attempts = paidRequests('ext', 'neverSettles').slice(before);
    expect(attempts).toHaveLength(2);
    const ids = attempts.map((request) => decoded(request.payment).extensions[PAYMENT_IDENTIFIER].info.id);
    expect(ids[0]).toMatch(/^prs_[0-9a-f]{40}$/);
    expect(ids[1]).toBe(ids[0]);
  });

  it("/proxy/sim and /relay/sim show the target's bazaar metadata as it declared it; a target without it shows none", async () => {
    const { key } = await createTestAccount(db, { credits: 1_000n });
    const declared = decodePaymentRequiredHeader(
      (await fetch(target('ext').routes.paid.url)).headers.get('payment-required')!,
    ).extensions!.bazaar;
    expect(declared).toMatchObject({ info: { output: { example: { paid: true, city: 'Lisbon' } } } });

    const proxySim = await t.client.post('/proxy/sim', relayBody('ext'), { headers: { 'x-api-key': key } });
    expect(proxySim.status).toBe(200);
    expect(proxySim.body.requiresPayment).toBe(true);
    expect(proxySim.body.bazaar).toEqual(declared);
    const relaySim = await t.client.post('/relay/sim', relayBody('ext'));
    expect(relaySim.status).toBe(200);
    expect(relaySim.body.bazaar).toEqual(declared);

    const plain = await t.client.post('/relay/sim', relayBody('plain'));
    expect(plain.status).toBe(200);
    expect(plain.body.requiresPayment).toBe(true);
    expect(plain.body).not.toHaveProperty('bazaar');
  });
});

describe('settlement_pending followed to its end', () => {
  /** The answer a target gave our paid call: 402 with PAYMENT-RESPONSE settlement_pending and its transaction. */
  function pendingAnswerOf(name: string) {
    const [answered] = paidRequests(name).slice(-1);
    expect(answered!.status).toBe(402);
    const receipt = decoded(answered!.paymentResponse);
    expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending' });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    return receipt.transaction as string;
  }

  it('/proxy: neither charged nor released while pending, not sent again; charged once the settlement lands', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const payTo = target('pending').routes.paid.payTo;
    const before = {
      service: await usdc(service()),
      target: await usdc(payTo),
      paid: paidRequests('pending').length,
    };

    const res = await t.client.post('/proxy', relayBody('pending'), { headers: { 'x-api-key': key } });
    expect(res.status).toBe(502);
    expect(res.body.message).toContain('still pending');
    const webhookId = res.body.webhook_id as string;
    expect(webhookId).toBeTruthy();
    // One paid attempt: a settlement under way is not a refusal to pay again.
    expect(paidRequests('pending').length - before.paid).toBe(1);
    const transaction = pendingAnswerOf('pending');
    expect(peers.facilitatorV2.pending.held.count()).toBe(1);

    const row = await db
      .selectFrom('proxy_payments')
      .select(['state', 'tx_hash'])
      .where('webhook_id', '=', webhookId)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ state: 'signed', tx_hash: transaction });
    expect((await t.client.get(`/webhooks/${webhookId}`)).status).toBe(202);
    expect(await usdc(service())).toBe(before.service);

    await peers.facilitatorV2.pending.held.release();
    const ended = await pollWebhook(t, webhookId, 60_000);
    expect(ended.status).toBe(200);
    expect(ended.body).toMatchObject({ status: 'success', txHash: transaction });
    expect(await usdc(service())).toBe(before.service - PRICE);
    expect(await usdc(payTo)).toBe(before.target + PRICE);
    await expectChargedOnce(db, organisationId, CREDITS);
  });

  it("/relay: the client's payment is neither refunded nor delivered while pending; delivered once the settlement lands", async () => {
    const client = await payer();
    const payTo = target('pending').routes.paid.payTo;
    const before = {
      client: await usdc(client.address),
      service: await usdc(service()),
      target: await usdc(payTo),
      paid: paidRequests('pending').length,
    };

    const res = await client.pay('/relay', relayBody('pending'));
    expect(res.status).toBe(502);
    expect(res.headers.get('x-service-status')).toBe('payment_validating');
    const webhookId = res.headers.get('x-service-webhook')!;
    expect(webhookId).toBeTruthy();
    expect(((await res.json()) as { message: string }).message).toContain('still pending');
    expect(paidRequests('pending').length - before.paid).toBe(1);
    const transaction = pendingAnswerOf('pending');

    const row = () =>
      db
        .selectFrom('relay_transactions')
        .select(['state', 'target_tx_hash'])
        .where('webhook_id', '=', webhookId)
        .executeTakeFirstOrThrow();
    expect(await row()).toEqual({ state: 'settled', target_tx_hash: transaction });
    expect((await t.client.get(`/webhooks/${webhookId}`)).status).toBe(202);
    expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);
    expect(await usdc(service())).toBe(before.service + RELAY_PRICE);

    await peers.facilitatorV2.pending.held.release();
    const ended = await pollWebhook(t, webhookId, 60_000);
    expect(ended.status).toBe(200);
    expect(ended.body).toMatchObject({ status: 'no_refund_needed' });
    expect((await row()).state).toBe('delivered');
    expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);
    expect(await usdc(service())).toBe(before.service + RELAY_PRICE - PRICE);
    expect(await usdc(payTo)).toBe(before.target + PRICE);
  });

  it("/relay settled through a facilitator that answers settlement_pending: the client's payment is followed as a settlement, and the call goes on once it lands", async () => {
    const viaFacilitator = await startTestService({
      ...peersEnv(peers),
      FACILITATOR_URL: peers.facilitatorV2.pending.url,
    });
    try {
      const client = await payer(undefined, () => viaFacilitator);
      const payTo = target('plain').routes.paid.payTo;
      const before = { client: await usdc(client.address), service: await usdc(service()), target: await usdc(payTo) };
      const { held } = peers.facilitatorV2.pending;
      const settles = () => peers.facilitatorV2.pending.calls.filter((call) => call.path === '/settle').length;
      const settlesBefore = settles();

      const answer = client.pay('/relay', relayBody('plain'));
      // The facilitator has answered settlement_pending once it holds the client's settlement.
      while (held.count() === 0) await new Promise((resolve) => setTimeout(resolve, 25));
      expect(settles() - settlesBefore).toBe(1);
      const pending = peers.facilitatorV2.pending.calls.at(-1)!.answer as { transaction: string };
      expect(pending).toMatchObject({ success: false, errorReason: 'settlement_pending' });
      await held.release();
      const res = await answer;

      expect(res.status).toBe(200);
      // Settled by the facilitator's own transaction, waited for: not by one of ours sent instead.
      expect(res.headers.get('x-client-payment')).toBe(pending.transaction);
      expect(await res.json()).toMatchObject({ ok: true, route: 'paid' });
      expect(await usdc(client.address)).toBe(before.client - RELAY_PRICE);
      expect(await usdc(service())).toBe(before.service + RELAY_PRICE - PRICE);
      expect(await usdc(payTo)).toBe(before.target + PRICE);
    } finally {
      await viaFacilitator.stop();
    }
  });
});
