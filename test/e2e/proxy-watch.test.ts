// Payments whose outcome the synchronous call cannot know: a target that never settles, a target
// that fails after verifying our payment, and a process that stopped between two steps. The
// worker watches the chain; webhook records reach a terminal state; credits are charged only for
// what the chain shows. Authorizations are signed for 10 s so that the wait stays short.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { utcDay, type Clock } from '../../payments/basics/clock';
import { organisationBalance } from '../../payments/accounts/credits';
import { proxyCredits } from '../../payments/accounts/fees';
import { randomNonce } from '../../payments/chains/evm';
import { signedFacts } from '../../payments/outgoing/index';
import { findProxyPayment, holdProxyPayment, type SignedFacts } from '../../payments/operations/proxy/records';
import { chooseRequirement, type PaymentChoice } from '../../payments/x402/choose';
import { decodePaymentHeader } from '../../payments/x402/headers';
import { readTargetPaymentRequired } from '../../payments/x402/parse';
import { PAYMENT_REQUIRED_HEADER } from '../../payments/x402/v2';
import type { ExactEvmPayload } from '../../payments/x402/types';
import { proxyPaymentSweep } from '../../worker/tasks/proxyPaymentSweep';
import { proxyPaymentWatch } from '../../worker/tasks/proxyPaymentWatch';
import { startPeers, type Peers } from '../../devnet/index';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { ledgerSums, pollWebhook, startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';
import { NO_POLICY } from '../../payments/accounts/policy';

const PRICE = 20_000n;
const CREDITS = proxyCredits(PRICE, 3).totalCredits;
const WINDOW_SECONDS = 10;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base-sepolia'],
    pricesMicroUsdc: { paid: PRICE, neverSettles: PRICE, error: PRICE },
  });
  t = await startProxyService(peers, { PROXY_PAYMENT_WINDOW_SECONDS: String(WINDOW_SECONDS) });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets['base-sepolia']!;
const serviceWallet = () => peers.wallets.service.evm.address;

function proxy(key: string, url: string) {
  return t.client.post('/proxy', { api_url: url, method: 'GET' }, { headers: { 'x-api-key': key } });
}

async function waitUntil(unixSeconds: bigint): Promise<void> {
  const waitMs = Number(unixSeconds) * 1000 - Date.now() + 50;
  if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
}

function validBeforeOf(header: string | null): bigint {
  const payment = decodePaymentHeader(header, PAYMENT_SCHEMES);
  if (!payment.ok) throw new Error('the target received no payment');
  return BigInt((payment.value.payload as ExactEvmPayload).authorization.validBefore);
}

describe('a payment the target never settles', () => {
  it('502 with webhook_id after two paid attempts; the record ends in payment_failed and every credit comes back', async () => {
    target().reset();
    const account = await createTestAccount(db, { credits: 1_000n });
    const walletBefore = await peers.usdcBalance('base-sepolia', serviceWallet());

    const never = await proxy(account.key, target().routes.neverSettles.url);
    expect(never.status).toBe(502);
    expect(never.body).toEqual({
      code: 'upstream_error',
      error: 'Bad Gateway',
      message: 'Upstream refused payment after 2 attempts',
      details: expect.any(String),
      upstreamStatus: 402,
      webhook_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    expect(never.headers.get('x-service-webhook')).toBe(never.body.webhook_id);
    // One unpaid request, then the same payment twice: never a second payment.
    const seen = target().requests.filter((request) => request.route === 'neverSettles');
    expect(seen).toHaveLength(3);
    expect(seen[0]!.payment).toBeNull();
    expect(seen[2]!.payment).toBe(seen[1]!.payment);

    // A target that fails after verifying our payment: also watched, also released.
    const failing = await proxy(account.key, target().routes.error.url);
    expect(failing.status).toBe(502);
    expect(failing.body).toMatchObject({ upstreamStatus: 500, webhook_id: expect.any(String) });

    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - 2n * CREDITS);
    const pending = await t.client.get(`/webhooks/${never.body.webhook_id}`);
    expect(pending.status).toBe(202);
    expect(pending.body).toMatchObject({ status: 'pending', network: 'base-sepolia' });

    const validBefore = validBeforeOf(seen[1]!.payment);
    expect(Number(validBefore) * 1000 - Date.now()).toBeLessThanOrEqual(WINDOW_SECONDS * 1000);
    const lastValidBefore = validBeforeOf(
      target()
        .requests.filter((request) => request.route === 'error')
        .at(-1)!.payment,
    );
    const expiry = lastValidBefore > validBefore ? lastValidBefore : validBefore;
    await waitUntil(expiry);
    // A live chain keeps producing blocks; the local one is asked to, until one passes the expiry.
    await peers.evmChains['base-sepolia']!.mineUntil(expiry);

    for (const id of [never.body.webhook_id, failing.body.webhook_id]) {
      const record = await pollWebhook(t, id, 40_000);
      expect(record.status).toBe(500);
      expect(record.body).toEqual({
        status: 'failed',
        network: 'base-sepolia',
        message: expect.stringContaining(`${CREDITS} reserved credits were released`),
        error: expect.any(String),
        errorType: 'payment_failed',
      });
    }
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n);
    expect(await ledgerSums(db, account.organisationId)).toEqual({
      grant: 1_000n,
      reserve: 2n * CREDITS,
      charge: 0n,
      release: 2n * CREDITS,
      refund: 0n,
    });
    expect(await peers.usdcBalance('base-sepolia', serviceWallet())).toBe(walletBefore);
  }, 180_000);
});

describe('a process that stopped between two steps', () => {
  const later = (minutes: number): Clock => ({ now: () => new Date(Date.now() + minutes * 60_000) });

  /** Our choice among the target's offers, as /proxy reads its 402. */
  async function choose() {
    const unpaid = await fetch(target().routes.paid.url);
    const parsed = readTargetPaymentRequired(
      unpaid.headers.get(PAYMENT_REQUIRED_HEADER) ?? undefined,
      await unpaid.text(),
    );
    if (!parsed) throw new Error('the target did not answer an x402 402');
    const choice = chooseRequirement(parsed.accepts, {
      schemes: PAYMENT_SCHEMES,
      networks: t.service.deps.chains.payingNetworks(),
      maxAmountMicroUsdc: PRICE,
    });
    if (!choice.ok) throw new Error(choice.details);
    return choice.value;
  }

  /** The credits held and the row written as /proxy writes them: signed when `signed` says what was. */
  async function hold(account: TestAccount, choice: PaymentChoice, reference: string, signed?: SignedFacts) {
    const held = await holdProxyPayment(
      db,
      {
        reference,
        key: { ...account, dailyCapCredits: 100_000n, accountPublicId: account.accountPublicId, policy: NO_POLICY },
        requestId: 'test',
        targetUrl: target().routes.paid.url,
        choice,
        credits: CREDITS,
        day: utcDay(new Date()),
        accountDailyLimitCredits: 1_000_000n,
        systemDailyLimitCredits: 1_000_000n,
      },
      signed,
    );
    expect(held).toMatchObject({ ok: true });
    return db.selectFrom('proxy_payments').selectAll().where('reference', '=', reference).executeTakeFirstOrThrow();
  }

  it('a payment sent and settled, but never recorded as such: the sweeper hands it to the watch, which charges it', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const choice = await choose();
    const reference = randomNonce();
    const prepared = await t.service.deps.chains.createPayment(choice, { now: new Date(), nonce: reference });
    if (!prepared.ok) throw new Error(prepared.details);
    const row = await hold(account, choice, reference, signedFacts(prepared.value));
    expect(row).toMatchObject({ state: 'signed', payer: prepared.value.payer });
    const paid = await fetch(target().routes.paid.url, { headers: { 'X-PAYMENT': prepared.value.header } });
    expect(paid.status).toBe(200);
    // ...and here the process stopped: no charge, no job.

    await proxyPaymentSweep({ ...t.service.deps, clock: later(11) })({}, undefined as never);
    const deadline = Date.now() + 60_000;
    while ((await findProxyPayment(db, row.id))!.state === 'signed' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const settled = await findProxyPayment(db, row.id);
    expect(settled).toMatchObject({ state: 'charged', tx_hash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n - CREDITS);
    expect(await ledgerSums(db, account.organisationId)).toMatchObject({
      reserve: CREDITS,
      charge: CREDITS,
      release: 0n,
    });

    // A second look changes nothing: the job is safe to repeat.
    await proxyPaymentWatch(t.service.deps)({ proxyPaymentId: String(row.id) }, undefined as never);
    expect(await ledgerSums(db, account.organisationId)).toMatchObject({
      reserve: CREDITS,
      charge: CREDITS,
      release: 0n,
    });
  });

  it('a payment signed but never handed to the watch (its request lost the database): swept once its authorization expired, not ten minutes later', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const choice = await choose();
    const reference = randomNonce();
    // Signed two minutes ago: its authorization expired long enough ago; the row is a minute old at most.
    const prepared = await t.service.deps.chains.createPayment(choice, {
      now: new Date(Date.now() - 120_000),
      nonce: reference,
    });
    if (!prepared.ok) throw new Error(prepared.details);
    const row = await hold(account, choice, reference, signedFacts(prepared.value));
    expect(row.state).toBe('signed');
    expect(Number(row.valid_before) * 1000).toBeLessThan(Date.now() - 60_000);
    // ...and here the request failed: no job. The sweep of this minute finds it.
    await proxyPaymentSweep(t.service.deps)({}, undefined as never);
    const deadline = Date.now() + 60_000;
    while ((await findProxyPayment(db, row.id))!.state === 'signed' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // Never sent: released, every credit back.
    expect(await findProxyPayment(db, row.id)).toMatchObject({ state: 'released' });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n);
  });

  it('credits reserved but never signed: released once the request must be over, and not before', async () => {
    const account = await createTestAccount(db, { credits: 1_000n });
    const row = await hold(account, await choose(), randomNonce());
    const watch = (minutes: number) =>
      proxyPaymentWatch({ ...t.service.deps, clock: later(minutes) })(
        { proxyPaymentId: String(row.id) },
        undefined as never,
      );
    await watch(1);
    expect((await findProxyPayment(db, row.id))!.state).toBe('reserved');
    await watch(11);
    expect(await findProxyPayment(db, row.id)).toMatchObject({
      state: 'released',
      outcome: expect.stringContaining('never signed'),
    });
    expect(await organisationBalance(db, account.organisationId)).toBe(1_000n);
    await watch(12);
    expect(await ledgerSums(db, account.organisationId)).toMatchObject({ reserve: CREDITS, release: CREDITS });
  });
});
