import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { peersEnv, startLlmService } from '../support/proxy';
import { startTestService, type TestService } from '../support/service';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { ifStarted } from '../support/teardown';

const PRICE_MICRO = 10_000n; // LLM_PRICE_USDC 0.01

let peers: Peers;
let llm: LocalLlm;
let t: TestService;
let service: string;
let client: string;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base'] });
  llm = await startLocalLlm();
  service = peers.wallets.service.evm.address;
  client = peers.wallets.client.evm.address;
  t = await startLlmService(peers, llm);
});
afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

async function balances(): Promise<[bigint, bigint]> {
  return [await peers.usdcBalance('base', client), await peers.usdcBalance('base', service)];
}

async function offered(path = '/llm/chat', body: unknown = { messages: [{ role: 'user', content: 'hi' }] }) {
  const res = await t.client.post(path, body);
  expect(res.status).toBe(402);
  return res.body.accepts;
}

describe('POST /llm/chat', () => {
  it('asks for payment first: 402 with x402 v1 requirements at LLM_PRICE_USDC', async () => {
    const res = await t.client.post('/llm/chat', { messages: [{ role: 'user', content: 'hi' }] });
    expect(res.status).toBe(402);
    expect(res.body.x402Version).toBe(1);
    expect(res.body.error).toBe('Payment Required');
    expect(res.body.accepts).toHaveLength(1);
    expect(res.body.accepts[0]).toMatchObject({
      scheme: 'exact',
      network: 'base',
      payTo: service,
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      maxAmountRequired: PRICE_MICRO.toString(),
      resource: `${t.service.url}/llm/chat`,
      extra: { name: 'USD Coin', version: '2' },
    });
  });

  it('the unmodified x402-fetch pays and gets the answer; the price moves on-chain, once', async () => {
    const [clientBefore, serviceBefore] = await balances();
    llm.requests.length = 0;
    const pay = peers.x402Fetch('base');
    const res = await pay(`${t.service.url}/llm/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hello model' }],
        model: 'someone-elses-model',
        max_tokens: 5000,
        temperature: 0.5,
      }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ response: 'Echo: hello model', model: llm.model });
    const settlement = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
    expect(settlement.ok && settlement.value).toMatchObject({ success: true, network: 'base', payer: client });
    expect(await balances()).toEqual([clientBefore - PRICE_MICRO, serviceBefore + PRICE_MICRO]);
    // The backend got the fixed model and a capped max_tokens, whatever the request said.
    expect(llm.requests).toHaveLength(1);
    expect(llm.requests[0]).toMatchObject({ model: llm.model, max_tokens: 16, temperature: 0.5 });
  });

  it('refuses a replayed payment and moves nothing the second time', async () => {
    const [accept] = await offered();
    const { header } = await peers.signEvmPayment(accept);
    const body = { messages: [{ role: 'user', content: 'once' }] };
    const [clientBefore] = await balances();
    const first = await t.client.post('/llm/chat', body, { headers: { 'X-Payment': header } });
    expect(first.status).toBe(200);
    const second = await t.client.post('/llm/chat', body, { headers: { 'X-Payment': header } });
    expect(second.status).toBe(400);
    expect(second.body.details).toMatch(/already used/);
    expect((await balances())[0]).toBe(clientBefore - PRICE_MICRO);
  });

  it('a failing backend leaves every balance unchanged', async () => {
    const [accept] = await offered();
    const { header } = await peers.signEvmPayment(accept);
    const before = await balances();
    llm.failWith = 500;
    try {
      const res = await t.client.post(
        '/llm/chat',
        { messages: [{ role: 'user', content: 'fail' }] },
        { headers: { 'X-Payment': header } },
      );
      expect(res.status).toBe(500);
      expect(res.body).toEqual({
        code: 'llm_failed',
        error: 'Chat request failed',
        message: expect.stringContaining('nothing was charged'),
      });
    } finally {
      llm.failWith = undefined;
    }
    expect(await balances()).toEqual(before);
  });

  it('a payment of another amount or to another wallet is refused with 402 and nothing moves', async () => {
    const [accept] = await offered();
    const before = await balances();
    const cheaper = await peers.signEvmPayment({ ...accept, maxAmountRequired: (PRICE_MICRO - 1n).toString() });
    const res = await t.client.post(
      '/llm/chat',
      { messages: [{ role: 'user', content: 'x' }] },
      { headers: { 'X-Payment': cheaper.header } },
    );
    expect(res.status).toBe(402);
    expect(res.body.error).toMatch(/wrong_amount/);
    expect(await balances()).toEqual(before);
  });

  it('a body without a messages array is 400 before any payment check', async () => {
    const res = await t.client.post('/llm/chat', { prompt: 'hi' }, { headers: { 'X-Payment': 'not even base64' } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: 'requestBody is missing the required property "messages"',
    });
    const notArray = await t.client.post('/llm/chat', { messages: 'hi' });
    expect(notArray.status).toBe(400);
    expect(notArray.body).toEqual({
      code: 'validation_failed',
      error: 'Bad Request',
      details: 'requestBody.messages must be array',
    });
  });
});

describe('POST /llm/translate', () => {
  it('is paid the same way and answers in Spanish', async () => {
    const [accept] = await offered('/llm/translate', { text: 'good morning' });
    expect(accept.resource).toBe(`${t.service.url}/llm/translate`);
    const { header } = await peers.signEvmPayment(accept);
    const [clientBefore] = await balances();
    const res = await t.client.post('/llm/translate', { text: 'good morning' }, { headers: { 'X-Payment': header } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ translation: 'ES: good morning', targetLanguage: 'es', model: llm.model });
    expect((await balances())[0]).toBe(clientBefore - PRICE_MICRO);
  });
});

describe('GET /llm/health and a service without a backend', () => {
  it('reports the backend', async () => {
    const res = await t.client.get('/llm/health');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok', configured: true, model: llm.model });
  });

  it('without a backend: 503 everywhere and a payment is not taken', async () => {
    const bare = await startTestService(peersEnv(peers));
    try {
      const health = await bare.client.get('/llm/health');
      expect(health.status).toBe(503);
      expect(health.body).toMatchObject({ status: 'unavailable', configured: false });
      const [accept] = await offered();
      const { header } = await peers.signEvmPayment(accept);
      const before = await balances();
      const res = await bare.client.post(
        '/llm/chat',
        { messages: [{ role: 'user', content: 'x' }] },
        { headers: { 'X-Payment': header } },
      );
      expect(res.status).toBe(503);
      expect(await balances()).toEqual(before);
    } finally {
      await bare.stop();
    }
  });
});

describe('a chat payment its request left half-way', () => {
  async function recordedPayment(settle: boolean) {
    const { verifyClientPaymentHeader } = await import('../../payments/incoming/verify');
    const { recordClientPayment } = await import('../../payments/incoming/store');
    const { settleClientPayment } = await import('../../payments/incoming/settle');
    const deps = t.service.deps;
    const [accept] = await offered();
    const { header } = await peers.signEvmPayment(accept);
    const verified = await verifyClientPaymentHeader({ version: 1, value: header }, [accept], deps);
    if (!verified.ok) throw new Error(verified.details);
    const recorded = await recordClientPayment(deps.db, verified.value, {
      mode: 'chat',
      targetUrl: accept.resource,
      targetMethod: 'POST',
    });
    if (!recorded.ok) throw new Error(recorded.details);
    if (settle) expect((await settleClientPayment(deps.db, recorded.value.id, deps)).kind).toBe('settled');
    // Its request is long gone.
    await deps.db
      .updateTable('relay_transactions')
      .set({ created_at: new Date(Date.now() - 11 * 60_000) })
      .where('id', '=', recorded.value.id)
      .execute();
    return recorded.value.id;
  }

  it('settled without an answer (the process stopped): the job refunds the payer exactly', async () => {
    const { followUpChatPayment, openChatPayments } = await import('../../payments/operations/chat/call');
    const before = await balances();
    const id = await recordedPayment(true);
    expect(await balances()).toEqual([before[0] - PRICE_MICRO, before[1] + PRICE_MICRO]);
    expect(await openChatPayments(t.service.deps.db, new Date(), 100)).toContain(id);
    expect(await followUpChatPayment(t.service.deps, id)).toBe('refunded');
    expect((await balances())[0]).toBe(before[0]);
    // Repeating the job sends nothing more.
    expect(await followUpChatPayment(t.service.deps, id)).toBe('delivered');
    expect((await balances())[0]).toBe(before[0]);
    expect(await openChatPayments(t.service.deps.db, new Date(), 100)).not.toContain(id);
  });

  it('never settled: the job closes it and nothing moves', async () => {
    const { followUpChatPayment } = await import('../../payments/operations/chat/call');
    const before = await balances();
    const id = await recordedPayment(false);
    expect(await followUpChatPayment(t.service.deps, id)).toBe('closed_unsettled');
    expect(await balances()).toEqual(before);
    const row = await t.service.deps.db
      .selectFrom('relay_transactions')
      .select(['state', 'failure_reason'])
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ state: 'settle_failed', failure_reason: 'abandoned' });
  });

  it('settled for an answer that was given: the job delivers it and refunds nothing', async () => {
    const { followUpChatPayment } = await import('../../payments/operations/chat/call');
    const before = await balances();
    const id = await recordedPayment(true);
    await t.service.deps.db
      .updateTable('relay_transactions')
      .set({ responded_at: new Date() })
      .where('id', '=', id)
      .execute();
    expect(await followUpChatPayment(t.service.deps, id)).toBe('delivered');
    expect(await balances()).toEqual([before[0] - PRICE_MICRO, before[1] + PRICE_MICRO]);
  });
});

describe('with FACILITATOR_URL set', () => {
  let viaFacilitator: TestService;
  beforeAll(async () => {
    viaFacilitator = await startTestService({
      ...peersEnv(peers),
      FACILITATOR_URL: peers.facilitator.url,
      LLM_BASE_URL: llm.url,
      LLM_API_KEY: llm.apiKey,
      LLM_MODEL: llm.model,
      LLM_MAX_TOKENS: '16',
    });
  });
  afterAll(async () => {
    await ifStarted(viaFacilitator)?.stop();
  });

  it.each(['/llm/chat', '/llm/translate'])(
    '%s settles the payment through the facilitator: once, exact amounts, no gas from our wallet',
    async (path) => {
      const body =
        path === '/llm/chat'
          ? { messages: [{ role: 'user', content: 'via facilitator' }] }
          : { text: 'via facilitator' };
      const asked = await viaFacilitator.client.post(path, body);
      expect(asked.status).toBe(402);
      const { header, payment } = await peers.signEvmPayment(asked.body.accepts[0]);
      const before = await balances();
      const serviceWei = await peers.nativeBalance('base', service);
      const calls = peers.facilitator.calls.length;

      const res = await viaFacilitator.client.post(path, body, { headers: { 'X-Payment': header } });

      expect(res.status).toBe(200);
      const settleCalls = peers.facilitator.calls.slice(calls).filter((call) => call.path === '/settle');
      expect(settleCalls).toHaveLength(1);
      expect(settleCalls[0]!.payment).toMatchObject({
        network: 'base',
        payload: { authorization: { nonce: payment.payload.authorization.nonce } },
      });
      const settlement = decodePaymentResponseHeader(res.headers.get('x-payment-response'));
      expect(settlement.ok && settlement.value).toMatchObject({
        success: true,
        network: 'base',
        payer: client,
        transaction: (settleCalls[0]!.answer as { transaction: string }).transaction,
      });
      expect(await balances()).toEqual([before[0] - PRICE_MICRO, before[1] + PRICE_MICRO]);
      // The facilitator paid the gas, not our wallet.
      expect(await peers.nativeBalance('base', service)).toBe(serviceWei);
      const row = await viaFacilitator.database.handle.db
        .selectFrom('relay_transactions')
        .select(['state', 'settle_method', 'mode'])
        .where('nonce_key', '=', payment.payload.authorization.nonce.toLowerCase())
        .executeTakeFirstOrThrow();
      expect(row).toEqual({ state: 'delivered', settle_method: 'facilitator', mode: 'chat' });
    },
  );
});
