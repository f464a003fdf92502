// One payment, whichever header carries it: an authorization sent in X-PAYMENT and again in
// PAYMENT-SIGNATURE (or the other way round) settles once, a replayed PAYMENT-SIGNATURE moves
// nothing, both headers at once and malformed ones are refused before anything moves, an
// `accepted` that is not one of our offers is a 402, and a relay settles through a version 2
// facilitator (FACILITATOR_URL) in version 2. Every response is checked against the document.
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { caip2Of } from '../../payments/basics/networkTable';
import type { ExactEvmPayload, PaymentRequirements } from '../../payments/x402/types';
import type { PaymentRequirementsV2 } from '../../payments/x402/v2';
import type { TestService } from '../support/service';
import { startLlmService, startProxyService } from '../support/proxy';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base' as const;
const TARGET_PRICE = 10_000n;
const RELAY_PRICE = 10_300n;
const CHAT_PRICE = 10_000n;

let peers: Peers;
let llm: LocalLlm;
let t: TestService;

beforeAll(async () => {
  [peers, llm] = await Promise.all([startPeers({ networks: [NETWORK], v2Targets: false }), startLocalLlm()]);
  t = await startLlmService(peers, llm);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

const base64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64');
const decode = (value: string | null): any => JSON.parse(Buffer.from(value!, 'base64').toString('utf8'));
const relayBody = () => ({ api_url: peers.targets[NETWORK]!.routes.paid.url, method: 'GET' });
const chatBody = { messages: [{ role: 'user', content: 'once' }] };

async function wallet() {
  const privateKey = generatePrivateKey();
  const address = privateKeyToAccount(privateKey).address;
  await peers.mint(NETWORK, address, 1_000_000n);
  return { privateKey, address };
}

async function legs(payer: string) {
  return {
    client: await peers.usdcBalance(NETWORK, payer),
    service: await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address),
    target: await peers.usdcBalance(NETWORK, peers.targets[NETWORK]!.routes.paid.payTo),
  };
}

/** Our 402 for the call, both forms, and one authorization signed for its base offer. */
async function signedFor(service: TestService, path: string, body: unknown, privateKey: `0x${string}`) {
  const first = await service.client.post(path, body);
  expect(first.status).toBe(402);
  const accept = (first.body.accepts as PaymentRequirements[]).find((entry) => entry.network === NETWORK)!;
  const required = decode(first.headers.get('payment-required'));
  const accepted: PaymentRequirementsV2 = required.accepts.find(
    (entry: { network: string }) => entry.network === caip2Of(NETWORK),
  );
  const { payment, header } = await peers.signEvmPayment(accept, {}, privateKey);
  const signature = (payload: ExactEvmPayload = payment.payload, entry: unknown = accepted) =>
    base64({ x402Version: 2, resource: required.resource, accepted: entry, payload });
  return { xPayment: header, paymentSignature: signature(), signature, accepted, payment };
}

describe('one authorization, either header', () => {
  it('/relay: sent in X-PAYMENT and then in PAYMENT-SIGNATURE, it settles once; the second is "already used"', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    const first = await t.client.post('/relay', relayBody(), { headers: { 'X-PAYMENT': signed.xPayment } });
    expect(first.status).toBe(200);
    expect(first.headers.get('payment-response')).toBeNull();
    const second = await t.client.post('/relay', relayBody(), {
      headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature },
    });
    expect(second.status).toBe(400);
    expect(second.body).toMatchObject({ code: 'payment_reused', details: expect.stringMatching(/already used/) });
    expect(await legs(payer.address)).toEqual({
      client: before.client - RELAY_PRICE,
      service: before.service + RELAY_PRICE - TARGET_PRICE,
      target: before.target + TARGET_PRICE,
    });
  });

  it('/relay: sent in PAYMENT-SIGNATURE and then in X-PAYMENT, the same', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    const first = await t.client.post('/relay', relayBody(), {
      headers: { 'payment-signature': signed.paymentSignature },
    });
    expect(first.status).toBe(200);
    expect(decode(first.headers.get('payment-response'))).toMatchObject({
      success: true,
      network: caip2Of(NETWORK),
      payer: payer.address,
      transaction: first.headers.get('x-client-payment'),
    });
    const second = await t.client.post('/relay', relayBody(), { headers: { 'X-PAYMENT': signed.xPayment } });
    expect(second.status).toBe(400);
    expect(second.body.details).toMatch(/already used/);
    expect((await legs(payer.address)).client).toBe(before.client - RELAY_PRICE);
  });

  it('/llm/chat: sent in X-Payment and then in PAYMENT-SIGNATURE, it settles once (payment_reused)', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/llm/chat', chatBody, payer.privateKey);
    const before = await legs(payer.address);
    const first = await t.client.post('/llm/chat', chatBody, { headers: { 'X-Payment': signed.xPayment } });
    expect(first.status).toBe(200);
    const second = await t.client.post('/llm/chat', chatBody, {
      headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature },
    });
    expect(second.status).toBe(400);
    expect(second.body).toMatchObject({ code: 'payment_reused', details: expect.stringMatching(/PAYMENT-SIGNATURE/) });
    const after = await legs(payer.address);
    expect([after.client, after.service]).toEqual([before.client - CHAT_PRICE, before.service + CHAT_PRICE]);
  });

  it('a replayed PAYMENT-SIGNATURE moves nothing, also when both copies arrive at once', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    const answers = await Promise.all(
      [0, 1].map(() =>
        t.client.post('/relay', relayBody(), { headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature } }),
      ),
    );
    // The second copy is the same request: told the first runs (409), or given its answer.
    const statuses = answers.map((res) => res.status).sort();
    expect([
      [200, 409],
      [200, 200],
    ]).toContainEqual(statuses);
    const settled = answers.find((res) => res.status === 200)!;
    const replay = await t.client.post('/relay', relayBody(), {
      headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature },
    });
    expect(replay.status).toBe(200);
    expect(replay.text).toBe(settled.text);
    expect(replay.headers.get('payment-response')).toBe(settled.headers.get('payment-response'));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    // The same payment for another request is still "already used".
    const other = await t.client.post(
      '/relay',
      { ...relayBody(), headers: { 'x-another': 'request' } },
      { headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature } },
    );
    expect(other.status).toBe(400);
    expect(other.body.details).toMatch(/already used/);
    expect(await legs(payer.address)).toEqual({
      client: before.client - RELAY_PRICE,
      service: before.service + RELAY_PRICE - TARGET_PRICE,
      target: before.target + TARGET_PRICE,
    });

    const chatPayer = await wallet();
    const chat = await signedFor(t, '/llm/chat', chatBody, chatPayer.privateKey);
    const chatBefore = await legs(chatPayer.address);
    const paid = await t.client.post('/llm/chat', chatBody, {
      headers: { 'PAYMENT-SIGNATURE': chat.paymentSignature },
    });
    expect(paid.status).toBe(200);
    expect(decode(paid.headers.get('payment-response'))).toMatchObject({ success: true, network: caip2Of(NETWORK) });
    const again = await t.client.post('/llm/chat', chatBody, {
      headers: { 'PAYMENT-SIGNATURE': chat.paymentSignature },
    });
    expect(again.status).toBe(400);
    expect(again.body.code).toBe('payment_reused');
    expect((await legs(chatPayer.address)).client).toBe(chatBefore.client - CHAT_PRICE);
  });
});

describe('refused before anything moves', () => {
  it('both headers at once: 400 on /relay, /llm/chat and /llm/translate', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    const headers = { 'X-PAYMENT': signed.xPayment, 'PAYMENT-SIGNATURE': signed.paymentSignature };
    for (const [path, body] of [
      ['/relay', relayBody()],
      ['/llm/chat', chatBody],
      ['/llm/translate', { text: 'hola' }],
    ] as const) {
      const res = await t.client.post(path, body, { headers });
      expect(res.status, path).toBe(400);
      expect(res.body, path).toMatchObject({
        code: 'validation_failed',
        details: expect.stringMatching(/both X-PAYMENT .* and PAYMENT-SIGNATURE/),
      });
    }
    expect(await legs(payer.address)).toEqual(before);
    // The authorization was never used: it still pays.
    const paid = await t.client.post('/relay', relayBody(), {
      headers: { 'PAYMENT-SIGNATURE': signed.paymentSignature },
    });
    expect(paid.status).toBe(200);
  });

  it('a malformed PAYMENT-SIGNATURE is answered as a malformed X-PAYMENT is: 400 on /relay, 402 on /llm/chat', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    const unknownNetwork = base64({
      x402Version: 2,
      accepted: { ...signed.accepted, network: 'eip155:61' },
      payload: signed.payment.payload,
    });
    const malformed = [
      'not base64!',
      base64({ x402Version: 1, scheme: 'exact', network: NETWORK, payload: signed.payment.payload }),
      base64({ x402Version: 2, accepted: signed.accepted }),
      signed.signature({ ...signed.payment.payload, signature: 'zz' }),
      unknownNetwork,
      base64({ x402Version: 2, accepted: { ...signed.accepted, amount: '1e4' }, payload: signed.payment.payload }),
    ];
    const xPayment = await t.client.post('/relay', relayBody(), { headers: { 'X-PAYMENT': 'not base64!' } });
    expect(xPayment.body).toMatchObject({
      code: 'validation_failed',
      details: expect.stringMatching(/^X-PAYMENT is not/),
    });
    for (const header of malformed) {
      const relay = await t.client.post('/relay', relayBody(), { headers: { 'PAYMENT-SIGNATURE': header } });
      expect(relay.status, header).toBe(xPayment.status);
      expect(relay.body.code).toBe('validation_failed');
      expect(relay.body.details).toMatch(/^PAYMENT-SIGNATURE is not an x402 version 2/);
      const chat = await t.client.post('/llm/chat', chatBody, { headers: { 'PAYMENT-SIGNATURE': header } });
      expect(chat.status, header).toBe(402);
      // A network no offer names is refused as such on the chat (code network_mismatch).
      expect(chat.body.code).toBe(header === unknownNetwork ? 'network_mismatch' : 'payment_invalid');
      expect(decode(chat.headers.get('payment-required')).accepts).toHaveLength(1);
    }
    expect(await legs(payer.address)).toEqual(before);
  });

  it('an `accepted` that is not one of our offers is a 402 naming why, with the offers of now', async () => {
    const payer = await wallet();
    const signed = await signedFor(t, '/relay', relayBody(), payer.privateKey);
    const before = await legs(payer.address);
    for (const accepted of [
      { ...signed.accepted, amount: (RELAY_PRICE - 1n).toString() },
      { ...signed.accepted, maxTimeoutSeconds: signed.accepted.maxTimeoutSeconds + 1 },
      { ...signed.accepted, extra: {} },
      { ...signed.accepted, network: NETWORK },
    ]) {
      const res = await t.client.post('/relay', relayBody(), {
        headers: { 'PAYMENT-SIGNATURE': signed.signature(signed.payment.payload, accepted) },
      });
      expect(res.status).toBe(402);
      expect(res.body).toMatchObject({ code: 'offer_mismatch', error: expect.stringMatching(/^offer_mismatch: /) });
      expect(decode(res.headers.get('payment-required')).accepts).toEqual([signed.accepted]);
    }
    expect(await legs(payer.address)).toEqual(before);
  });
});

describe('FACILITATOR_URL naming a version 2 facilitator', () => {
  it('settles a relay through it in version 2, and the target is paid', async () => {
    const viaV2 = await startProxyService(peers, { FACILITATOR_URL: peers.facilitatorV2.url });
    try {
      for (const header of ['X-PAYMENT', 'PAYMENT-SIGNATURE'] as const) {
        const payer = await wallet();
        const signed = await signedFor(viaV2, '/relay', relayBody(), payer.privateKey);
        const before = await legs(payer.address);
        const calls = peers.facilitatorV2.calls.length;
        const facilitatorEth = await peers.nativeBalance(NETWORK, peers.facilitatorV2.evmAddress);
        const res = await viaV2.client.post('/relay', relayBody(), {
          headers: { [header]: header === 'X-PAYMENT' ? signed.xPayment : signed.paymentSignature },
        });
        expect(res.status, header).toBe(200);
        expect(await legs(payer.address)).toEqual({
          client: before.client - RELAY_PRICE,
          service: before.service + RELAY_PRICE - TARGET_PRICE,
          target: before.target + TARGET_PRICE,
        });
        // The facilitator sent the settlement (and paid its gas), in version 2.
        const settles = peers.facilitatorV2.calls.slice(calls).filter((call) => call.path === '/settle');
        expect(settles).toHaveLength(1);
        expect(settles[0]).toMatchObject({
          x402Version: 2,
          network: caip2Of(NETWORK),
          payment: { accepted: signed.accepted, payload: signed.payment.payload },
          requirements: signed.accepted,
          answer: { success: true, transaction: res.headers.get('x-client-payment') },
        });
        expect(await peers.nativeBalance(NETWORK, peers.facilitatorV2.evmAddress)).toBeLessThan(facilitatorEth);
      }
    } finally {
      await viaV2.stop();
    }
  });
});
