// Networks beyond the six of the interface, against the local peers: a client on Base pays /relay
// with the unmodified x402-fetch for a target that sells on Polygon (a local chain with Polygon's
// chain id and USDC), every leg read from the chains; and a target whose stablecoin moves only by
// Permit2 (MegaETH's MegaUSD, its offer built by @x402/evm's own server scheme) is refused by name,
// in the dry runs and the paid calls alike, before anything moves.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { encodePaymentRequiredHeader } from '@x402/core/http';
import type { PaymentRequired } from '@x402/core/types';
import { ExactEvmScheme } from '@x402/evm/exact/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { organisationBalance } from '../../payments/credits';
import { createTestAccount } from '../support/accounts';
import { payingFetch, relayLegBalances, relayRequest } from '../support/relay';
import { peersEnv } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** ceil(12,345 x 1.03) = ceil(12,715.35) */
const TOTAL = 12_716n;
const PAY_TO = '0x1111111111111111111111111111111111111111';

let peers: Peers;
let t: TestService;
let permit2Target: Server;
let permit2Url: string;

/** A target selling on MegaETH at $0.01, its 402 (version 2) as @x402/evm's exact server scheme prices it. */
async function startPermit2Target(): Promise<Server> {
  const price = await new ExactEvmScheme().parsePrice('$0.01', 'eip155:4326');
  const server = createServer((request, response) => {
    const paymentRequired: PaymentRequired = {
      x402Version: 2,
      error: 'Payment required',
      resource: {
        url: `http://${request.headers.host}${request.url}`,
        description: 'MegaETH data',
        mimeType: 'application/json',
      },
      accepts: [
        {
          scheme: 'exact',
          network: 'eip155:4326',
          amount: price.amount,
          asset: price.asset,
          payTo: PAY_TO,
          maxTimeoutSeconds: 300,
          extra: price.extra ?? {},
        },
      ],
    };
    response.writeHead(402, {
      'content-type': 'application/json',
      'payment-required': encodePaymentRequiredHeader(paymentRequired),
    });
    response.end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

beforeAll(async () => {
  peers = await startPeers({ networks: ['base', 'polygon'], pricesMicroUsdc: { paid: PRICE } });
  permit2Target = await startPermit2Target();
  const host = `127.0.0.1:${(permit2Target.address() as AddressInfo).port}`;
  permit2Url = `http://${host}/data`;
  t = await startTestService(
    { ...peersEnv(peers, [host]), NETWORKS: 'base,polygon,megaeth', RPC_URL_MEGAETH: 'http://127.0.0.1:9' },
    { resolver: tableResolver() },
  );
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  if (ifStarted(permit2Target)) await new Promise((resolve) => permit2Target.close(resolve));
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

describe('a target whose stablecoin moves only by Permit2', () => {
  const refusal = {
    code: 'transfer_method_unsupported',
    error: 'Unprocessable Content',
    details: expect.stringContaining('MegaUSD on megaeth is paid by the permit2 transfer method'),
  };

  it('is refused by name in both dry runs', async () => {
    const relaySim = await t.client.post('/relay/sim', { api_url: permit2Url, method: 'GET' });
    expect(relaySim.status).toBe(422);
    expect(relaySim.body).toEqual(refusal);
    const { key } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    const proxySim = await t.client.post(
      '/proxy/sim',
      { api_url: permit2Url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(proxySim.status).toBe(422);
    expect(proxySim.body).toEqual(refusal);
  });

  it('is refused by /relay before any offer, and by /proxy before any credit moves', async () => {
    const relay = await t.client.post('/relay', { api_url: permit2Url, method: 'GET' });
    expect(relay.status).toBe(422);
    expect(relay.body).toEqual(refusal);
    const { key, organisationId } = await createTestAccount(t.database.handle.db, { credits: 1_000n });
    const proxy = await t.client.post(
      '/proxy',
      { api_url: permit2Url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(proxy.status).toBe(422);
    expect(proxy.body).toEqual(refusal);
    const payments = await t.database.handle.db
      .selectFrom('proxy_payments')
      .select('id')
      .where('organisation_id', '=', organisationId)
      .execute();
    expect(payments).toEqual([]);
    expect(await organisationBalance(t.database.handle.db, organisationId)).toBe(1_000n);
  });
});
