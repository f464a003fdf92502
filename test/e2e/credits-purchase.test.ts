// POST /v1/credits/purchase against the local peers: the 402 offers credits x 1000 atomic USDC,
// the unmodified x402-fetch (version 1) and @x402/fetch (version 2) pay it, the credits arrive once
// the payment settles with a ledger entry of kind 'purchase', and the same payment sent again (also
// concurrently) gets the recorded answer and is never credited twice. Amounts are read from the chain.
import { wrapFetchWithPayment as wrapFetchV2 } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { ledgerSums, startProxyService } from '../support/proxy';
import { contractFetch, payingFetch } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  t = await startProxyService(peers);
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const purchaseUrl = () => `${t.service.url}/v1/credits/purchase`;

async function usdc() {
  return {
    client: await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address),
    service: await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address),
  };
}

function purchase(key: string, credits: number, headers: Record<string, string> = {}) {
  return t.client.post('/v1/credits/purchase', { credits }, { headers: { 'x-api-key': key, ...headers } });
}

async function purchaseRows(organisationId: bigint) {
  return db.selectFrom('credit_purchases').selectAll().where('organisation_id', '=', organisationId).execute();
}

describe('buying credits over x402', () => {
  it('answers 402 offering credits x 1000 atomic units of USDC, in both versions; a key is required', async () => {
    const { key } = await createTestAccount(db);
    const res = await purchase(key, 2_500);
    expect(res.status).toBe(402);
    expect(res.body).toMatchObject({ code: 'payment_required', x402Version: 1 });
    expect(res.body.accepts[0]).toMatchObject({
      network: NETWORK,
      maxAmountRequired: '2500000',
      payTo: peers.wallets.service.evm.address,
      resource: purchaseUrl(),
    });
    expect(res.headers.get('payment-required')).toBeTruthy();
    expect((await t.client.post('/v1/credits/purchase', { credits: 1 })).status).toBe(401);
  });

  it('version 1 (x402-fetch): the credits are added once the payment settles, exactly, with a purchase in the ledger', async () => {
    const { key, organisationId, prefix } = await createTestAccount(db);
    const before = await usdc();
    const res = await payingFetch(
      peers,
      NETWORK,
      10_000_000n,
    )(purchaseUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ credits: 2_500 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      status: 'credited',
      credits: 2_500,
      amount: '2500000',
      network: NETWORK,
      payer: peers.wallets.client.evm.address,
      balance: 2_500,
    });
    expect(res.headers.get('x-payment-response')).toBeTruthy();
    expect(await usdc()).toEqual({ client: before.client - 2_500_000n, service: before.service + 2_500_000n });
    expect(await organisationBalance(db, organisationId)).toBe(2_500n);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ purchase: 2_500n, grant: 0n });
    const webhook = await t.client.get(`/webhooks/${String(body.webhook_id)}`);
    expect(webhook.status).toBe(200);
    // The organisation reads its purchase back: in its history with the payment's details as the
    // answer gave them, and in its usage's totals.
    const history = await t.client.get('/v1/payments?kind=purchase', { headers: { 'x-api-key': key } });
    expect(history.status).toBe(200);
    expect(body.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(history.body.items).toEqual([
      {
        id: expect.stringMatching(/^crd_[0-9]+$/) as string,
        kind: 'purchase',
        status: 'credited',
        created_at: expect.any(String) as string,
        settled_at: expect.any(String) as string,
        key_prefix: prefix,
        target: null,
        network: NETWORK,
        amount_micro_usdc: '2500000',
        credits: 2_500,
        fee_micro_usdc: '0',
        tx_hash: body.transaction,
        // The service pays on a local chain here: no public explorer.
        explorer_url: null,
        webhook_id: body.webhook_id,
      },
    ]);
    const usage = await t.client.get('/v1/usage', { headers: { 'x-api-key': key } });
    expect(usage.status).toBe(200);
    expect(usage.body.totals).toMatchObject({ purchased_credits: 2_500, granted_credits: 0 });
  });

  it('version 2 (@x402/fetch): paid with PAYMENT-SIGNATURE, credited once', async () => {
    const { key, organisationId } = await createTestAccount(db);
    const before = await usdc();
    const paying = wrapFetchV2(
      contractFetch(),
      x402ClientV2(privateKeyToAccount(peers.wallets.client.evm.privateKey), { maxValueMicroUsdc: 10_000_000n }),
    );
    const res = await paying(purchaseUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ credits: 1_200 }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('payment-response')).toBeTruthy();
    expect(await usdc()).toEqual({ client: before.client - 1_200_000n, service: before.service + 1_200_000n });
    expect(await organisationBalance(db, organisationId)).toBe(1_200n);
  });

  it('the same payment again, and five at once, get the recorded answer; the credits arrive once', async () => {
    const { key, organisationId } = await createTestAccount(db);
    const offer = await purchase(key, 700);
    const { header } = await peers.signEvmPayment(offer.body.accepts[0] as PeerRequirements);
    const before = await usdc();
    const answers = await Promise.all(Array.from({ length: 5 }, () => purchase(key, 700, { 'X-PAYMENT': header })));
    for (const answer of answers) {
      expect([200, 202]).toContain(answer.status);
      expect(answer.body).toMatchObject({ credits: 700, amount: '700000' });
    }
    const first = answers.find((answer) => answer.headers.get('idempotent-replayed') === null)!;
    expect(first.status).toBe(200);
    const again = await purchase(key, 700, { 'X-PAYMENT': header });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);

    expect(await usdc()).toEqual({ client: before.client - 700_000n, service: before.service + 700_000n });
    expect(await organisationBalance(db, organisationId)).toBe(700n);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ purchase: 700n });
    expect(await purchaseRows(organisationId)).toHaveLength(1);

    // The same payment under another organisation's key buys nothing.
    const other = await createTestAccount(db);
    const stolen = await purchase(other.key, 700, { 'X-PAYMENT': header });
    expect(stolen.status).toBe(400);
    expect(stolen.body.code).toBe('payment_reused');
    expect(await organisationBalance(db, other.organisationId)).toBe(0n);
  });
});
