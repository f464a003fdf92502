// Networks beyond the six of the interface, against the local peers: a client on Base pays /relay
// with the unmodified x402-fetch for a target that sells on Polygon (a local chain with Polygon's
// chain id and USDC), every leg read from the chains. Paying a target whose stablecoin moves only by
// Permit2 (MegaETH's MegaUSD), and every other kind of target through every endpoint, is
// test/e2e/pay-every-endpoint.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { payingFetch, relayLegBalances, relayRequest } from '../support/relay';
import { peersEnv } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** ceil(12,345 x 1.03) = ceil(12,715.35) */
const TOTAL = 12_716n;

let peers: Peers;
let t: TestService;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base', 'polygon'], pricesMicroUsdc: { paid: PRICE } });
  t = await startTestService(
    { ...peersEnv(peers), NETWORKS: 'base,polygon,megaeth', RPC_URL_MEGAETH: 'http://127.0.0.1:9' },
    { resolver: tableResolver() },
  );
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

describe('a client on Base paying for a target on Polygon', () => {
  it('/config lists Polygon and MegaETH beside Base', async () => {
    const res = await t.client.get('/config');
    expect(res.status).toBe(200);
    expect(res.body.networks.enabled).toEqual(['base', 'polygon', 'megaeth']);
    expect(res.body.networks.v2).toEqual(['eip155:8453', 'eip155:137', 'eip155:4326']);
  });

  it('/relay/sim prices it on Polygon', async () => {
    const res = await t.client.post('/relay/sim', { api_url: peers.targets.polygon!.routes.paid.url, method: 'GET' });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      requiresPayment: true,
      targetPaymentRequirements: {
        network: 'polygon',
        asset: '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359',
        maxAmountRequired: PRICE.toString(),
      },
      relayFeeBreakdown: { totalAmount: 0.012716 },
    });
  });

  it('x402-fetch pays us on Base, we pay the target on Polygon: each leg moves once, on its own chain', async () => {
    const payTo = peers.targets.polygon!.routes.paid.payTo;
    const before = {
      base: await relayLegBalances(peers, 'base', payTo),
      polygon: await relayLegBalances(peers, 'polygon', payTo),
    };
    const res = await payingFetch(peers, 'base')(
      `${t.service.url}/relay`,
      relayRequest({ api_url: peers.targets.polygon!.routes.paid.url, method: 'GET', network: 'base' }),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ route: 'paid', network: 'polygon' });
    const after = {
      base: await relayLegBalances(peers, 'base', payTo),
      polygon: await relayLegBalances(peers, 'polygon', payTo),
    };
    expect(after.base.client).toBe(before.base.client - TOTAL);
    expect(after.base.service).toBe(before.base.service + TOTAL);
    expect(after.polygon.service).toBe(before.polygon.service - PRICE);
    expect(after.polygon.target).toBe(before.polygon.target + PRICE);
    // Nothing of it on the other chain.
    expect(after.base.target).toBe(before.base.target);
    expect(after.polygon.client).toBe(before.polygon.client);
  });
});
