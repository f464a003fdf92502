// /relay to a batch-settlement target: the client (the unmodified x402-fetch 1.2, exact, on Base
// Sepolia) pays us the price plus the fee; we pay the target (the unmodified @x402/express 2.27
// asking batch-settlement alone on Polygon Amoy) by a voucher on our own channel: one deposit,
// then vouchers. The client pays what the seller charged plus the fee (here the whole price: no
// refund); a target that fails charges nothing and the client is refunded in full. Every leg is
// read from the chain, the seller's after its channel manager claims and settles.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { batchTargetName, startPeers, type Peers, type Target } from '../../devnet/index';
import { peersEnv, pollWebhook } from '../support/proxy';
import { payingFetch, relayRequest } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const CLIENT_NETWORK = 'base-sepolia' as const;
const NETWORK = 'polygon-amoy' as const;
const PRICE = 10_000n;
/** ceil(10,000 x 1.03): what the client pays for a call. */
const TOTAL = 10_300n;
const DEPOSIT = 25n * PRICE;
const CALLS = 3;

let peers: Peers;
let t: TestService;
let db: Db;
let target: Target;

beforeAll(async () => {
  peers = await startPeers({ networks: [CLIENT_NETWORK, NETWORK], pricesMicroUsdc: { paid: PRICE } });
  try {
    target = peers.targets[batchTargetName(NETWORK)]!;
    t = await startTestService(
      { ...peersEnv(peers), PAYER_CHANNEL_DEPOSIT_MULTIPLIER: '25' },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
  } catch (error) {
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const client = () => peers.wallets.client.evm.address;
const ours = () => peers.wallets.service.evm.address;
const relay = (url: string) =>
  payingFetch(peers, CLIENT_NETWORK)(
    `${t.service.url}/relay`,
    relayRequest({ api_url: url, method: 'GET', network: CLIENT_NETWORK }),
  );

async function legs() {
  return {
    client: await peers.usdcBalance(CLIENT_NETWORK, client()),
    oursOnClientNetwork: await peers.usdcBalance(CLIENT_NETWORK, ours()),
    oursOnTargetNetwork: await peers.usdcBalance(NETWORK, ours()),
    payTo: await peers.usdcBalance(NETWORK, target.payTo),
  };
}

describe('/relay to a batch-settlement target', () => {
  it('is priced by the dry run as a channel payment', async () => {
    const sim = await t.client.post('/relay/sim', { api_url: target.routes.paid.url, method: 'GET' });
    expect(sim.status, sim.text).toBe(200);
    expect(sim.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: { scheme: 'batch-settlement', network: NETWORK },
      pricing: { scheme: 'batch-settlement' },
    });
  });

  it(`pays ${CALLS} calls by vouchers on one channel: the client pays the price plus the fee, our tokens move once`, async () => {
    const before = await legs();
    for (let call = 1; call <= CALLS; call++) {
      const res = await relay(target.routes.paid.url);
      expect(res.status, await res.clone().text()).toBe(200);
    }
    const rows = await db
      .selectFrom('relay_transactions')
      .select(['state', 'target_scheme', 'target_used_micro', 'charged_micro', 'refund_micro', 'target_tx_hash'])
      .orderBy('id')
      .execute();
    expect(rows).toEqual(
      Array.from({ length: CALLS }, () => ({
        state: 'delivered',
        target_scheme: 'batch-settlement',
        target_used_micro: PRICE,
        charged_micro: TOTAL,
        refund_micro: null,
        target_tx_hash: null,
      })),
    );
    const vouchers = await db.selectFrom('payer_vouchers').select(['state', 'call_reference']).orderBy('id').execute();
    expect(vouchers.map((voucher) => voucher.state)).toEqual(Array<string>(CALLS).fill('charged'));
    expect(vouchers.every((voucher) => voucher.call_reference?.startsWith('relay:'))).toBe(true);

    // The seller claims and settles what it charged.
    await target.batchSettlement[0]!.manager.claimAndSettle();
    const after = await legs();
    expect(after).toEqual({
      client: before.client - BigInt(CALLS) * TOTAL,
      oursOnClientNetwork: before.oursOnClientNetwork + BigInt(CALLS) * TOTAL,
      oursOnTargetNetwork: before.oursOnTargetNetwork - DEPOSIT,
      payTo: before.payTo + BigInt(CALLS) * PRICE,
    });
  });

  it('a target that fails charges nothing: the client is refunded in full, no transaction to the target', async () => {
    const before = await legs();
    const res = await relay(target.routes.error.url);
    expect(res.status).toBe(502);
    const webhookId = res.headers.get('x-service-webhook')!;
    expect(webhookId).not.toBeNull();
    const record = await pollWebhook(t, webhookId, 60_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', network: CLIENT_NETWORK });
    const [last] = await db.selectFrom('payer_vouchers').select('state').orderBy('id', 'desc').limit(1).execute();
    expect(last).toEqual({ state: 'not_charged' });
    expect(await legs()).toEqual(before);
  });
});
