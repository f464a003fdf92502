// Paying an upto target whose answer to our paid call is cut half-way after it settled: we never
// see its PAYMENT-RESPONSE, so the watch jobs find the settlement on the chain (the Permit2 nonce,
// the token's logs). The target is unmodified @x402/express 2.27 asking upto on Polygon Amoy and
// settling 7,500 of its 20,000 micro-USDC maximum through @x402/evm's facilitator and
// x402UptoPermit2Proxy. /proxy charges what it moved plus the fee and releases the rest; /relay
// refunds an exact client the unused part on its own network. Upto targets answering normally, on
// every endpoint, are test/e2e/pay-every-endpoint.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { atomicAmount, type EvmNetworkName, type Peers } from '../../devnet/index';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { ledgerSums, peersEnv, pollWebhook } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';
import {
  RELAY_UPTO_MAX_TOTAL,
  RELAY_UPTO_USED_TOTAL,
  startUptoPeers,
  UPTO_RESERVED_CREDITS,
  UPTO_USED,
  UPTO_USED_CREDITS,
} from '../support/upto';

const TARGET = 'upto-less-polygon-amoy';

let peers: Peers;
let t: TestService;
let db: Db;
/** A fault proxy in front of the target: it breaks the answer to our paid call. */
let breaking: FaultProxy | undefined;

beforeAll(async () => {
  peers = await startUptoPeers('base-sepolia', 'polygon-amoy', TARGET);
  try {
    // After the target settled, the answer is cut half-way: we never see its PAYMENT-RESPONSE.
    breaking = await startFaultProxy({
      upstream: peers.targets[TARGET]!.url,
      choose: (request) => (request.headers['payment-signature'] ? 'reset_mid_body' : 'pass'),
    });
    const allowed = new URL(breaking.url).host;
    t = await startTestService({ ...peersEnv(peers, [allowed]) }, { resolver: tableResolver() });
    db = t.database.handle.db;
  } catch (error) {
    await breaking?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await breaking?.close();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;

describe('an upto settlement the target does not report', () => {
  it("is found by the watch job from the chain (Permit2 nonce, the token's logs) and charged what it moved plus the fee, the rest released", async () => {
    const network: EvmNetworkName = 'polygon-amoy';
    const target = peers.targets[TARGET]!;
    target.reset();
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const before = {
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    };

    const res = await t.client.post(
      '/proxy',
      { api_url: `${breaking!.url}${new URL(target.routes.paid.url).pathname}`, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );

    expect(res.status, res.text).toBe(502);
    const webhookId = (res.body as { webhook_id?: string }).webhook_id!;
    expect(webhookId).toBeDefined();
    const record = await pollWebhook(t, webhookId, 30_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'success', network });
    const used = atomicAmount(network, UPTO_USED);
    expect({
      service: await peers.usdcBalance(network, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    }).toEqual({ service: before.service - used, target: before.target + used });
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - UPTO_USED_CREDITS);
    expect(await ledgerSums(db, organisationId)).toEqual({
      grant: 1_000n,
      reserve: UPTO_RESERVED_CREDITS,
      charge: UPTO_USED_CREDITS,
      release: UPTO_RESERVED_CREDITS - UPTO_USED_CREDITS,
      refund: 0n,
    });
    const [row] = await db
      .selectFrom('proxy_payments')
      .selectAll()
      .where('organisation_id', '=', organisationId)
      .execute();
    expect(row).toMatchObject({
      state: 'charged',
      scheme: 'upto',
      amount_micro_usdc: UPTO_USED,
      credits: UPTO_USED_CREDITS,
    });
    expect(row!.tx_hash).toMatch(/^0x[0-9a-f]{64}$/);
  });
});

describe('an upto settlement the target does not report, on /relay', () => {
  it('is found by the relay watch job; the exact client is refunded the unused part on its own network', async () => {
    const network: EvmNetworkName = 'polygon-amoy';
    const clientNetwork: EvmNetworkName = 'base-sepolia';
    const target = peers.targets[TARGET]!;
    target.reset();
    const client = peers.wallets.client.evm.address;
    const before = {
      client: await peers.usdcBalance(clientNetwork, client),
      ours: await peers.usdcBalance(clientNetwork, service()),
      target: await peers.usdcBalance(network, target.routes.paid.payTo),
    };

    const res = await payingFetch(peers, clientNetwork)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: `${breaking!.url}${new URL(target.routes.paid.url).pathname}`, method: 'GET' }),
    );

    // Our payment left, the target's answer did not arrive: a 502 with the record to poll.
    expect(res.status).toBe(502);
    const webhookId = res.headers.get('x-service-webhook')!;
    expect(webhookId).not.toBeNull();
    const record = await pollWebhook(t, webhookId, 30_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', network: clientNetwork });
    expect(await peers.usdcBalance(network, target.routes.paid.payTo)).toBe(
      before.target + atomicAmount(network, UPTO_USED),
    );
    expect(await peers.usdcBalance(clientNetwork, client)).toBe(before.client - RELAY_UPTO_USED_TOTAL);
    expect(await peers.usdcBalance(clientNetwork, service())).toBe(before.ours + RELAY_UPTO_USED_TOTAL);
    const [row] = (await relayRows(db)).filter(
      (candidate) => candidate.client_tx_hash === res.headers.get('x-client-payment'),
    );
    expect(row).toMatchObject({
      state: 'refunded',
      target_used_micro: UPTO_USED,
      charged_micro: RELAY_UPTO_USED_TOTAL,
      refund_micro: RELAY_UPTO_MAX_TOTAL - RELAY_UPTO_USED_TOTAL,
    });
  });
});
