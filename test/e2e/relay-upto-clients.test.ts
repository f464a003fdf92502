// /relay paid by upto: unmodified @x402/fetch 2.27 with @x402/evm's upto client scheme registered
// picks the upto entry our 402 offers first for a target that prices by upto (served by unmodified
// @x402/express, settled by @x402/evm's facilitator), signs a Permit2 permit for the target's
// maximum plus the fee, and pays in the end exactly what the target settled plus the fee on it:
// one settlement of its permit, no refund. Every money leg is read from the chain. A client
// without upto still pays exact (the maximum plus the fee, the unused part refunded); an exact
// target is never offered upto; a permit used once is refused again; a target that fails leaves
// the permit unsettled.
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { wrapFetchWithPayment } from '@x402/fetch';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { EvmNetworkName, Peers, Target } from '../../devnet/index';
import { EVM_NETWORKS, startPeers } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { peersEnv } from '../support/proxy';
import { contractFetch, relayRequest, relayRows } from '../support/relay';
import { startTestService, type TestService } from '../support/service';
import { tableResolver } from '../support/resolver';
import { ifStarted } from '../support/teardown';
import { approvePermit2AsOwner } from '../support/upto';

const MAXIMUM = 20_000n;
const USED = 7_500n;
/** ceil(20,000 x 1.03): the most a client pays (the maximum plus the fee): our upto entry's amount. */
const MAX_TOTAL = 20_600n;
/** ceil(7,500 x 1.03): what a client pays when the target settled 7,500. */
const USED_TOTAL = 7_725n;

const CASES: { network: EvmNetworkName; clientNetwork: EvmNetworkName }[] = [
  { network: 'polygon-amoy', clientNetwork: 'base-sepolia' },
  { network: 'megaeth', clientNetwork: 'base' },
];
const KINDS = [
  { kind: 'less', settles: USED, charged: USED_TOTAL },
  { kind: 'max', settles: MAXIMUM, charged: MAX_TOTAL },
] as const;

const atomic = (network: EvmNetworkName, micro: bigint) => micro * 10n ** BigInt(EVM_NETWORKS[network].decimals - 6);
const targetName = (kind: string, network: EvmNetworkName) => `upto-${kind}-${network}`;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base', 'base-sepolia', 'megaeth', 'polygon-amoy'],
    pricesMicroUsdc: { paid: MAXIMUM, paidEcho: MAXIMUM, neverSettles: MAXIMUM, error: MAXIMUM, slow: MAXIMUM },
    targets: [
      ...CASES.flatMap(({ network }) =>
        KINDS.map(({ kind, settles }) => ({
          name: targetName(kind, network),
          network,
          x402Version: 2 as const,
          v2Offer: { scheme: 'upto' as const, uptoChargeMicroUsdc: settles },
        })),
      ),
      { name: 'exact-polygon-amoy', network: 'polygon-amoy' as const, x402Version: 2 as const },
    ],
  });
  try {
    t = await startTestService({ ...peersEnv(peers) }, { resolver: tableResolver() });
    db = t.database.handle.db;
    // The client's one approval of Permit2 on each token it pays with, as its owner would give it.
    for (const { clientNetwork } of CASES)
      await approvePermit2AsOwner(peers, clientNetwork, peers.wallets.client.evm.privateKey);
  } catch (error) {
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;

/** @x402/fetch over contractFetch (every answer checked against our OpenAPI document), noting the payments it sends. */
function clientFetch({ upto }: { upto: boolean }) {
  const sent: string[] = [];
  const base = contractFetch();
  const noting: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const signature = request.headers.get('payment-signature');
    if (signature) sent.push(signature);
    return base(request);
  };
  const account = privateKeyToAccount(peers.wallets.client.evm.privateKey);
  return { fetch: wrapFetchWithPayment(noting, x402ClientV2(account, { upto })), sent };
}

function decodeJsonHeader(value: string | null): Record<string, unknown> {
  return JSON.parse(Buffer.from(value ?? '', 'base64').toString('utf8')) as Record<string, unknown>;
}

async function legs(network: EvmNetworkName, clientNetwork: EvmNetworkName, target: Target) {
  return {
    client: await peers.usdcBalance(clientNetwork, client()),
    ours: await peers.usdcBalance(clientNetwork, service()),
    ourTargetSide: await peers.usdcBalance(network, service()),
    target: await peers.usdcBalance(network, target.routes.paid.payTo),
  };
}

describe.each(CASES)(
  'an upto target on $network, the client paying on $clientNetwork',
  ({ network, clientNetwork }) => {
    it('our 402 offers upto (the maximum plus the fee) before exact on each network we receive on; the version 1 body stays exact', async () => {
      const target = peers.targets[targetName('less', network)]!;
      const res = await contractFetch()(
        `${t.service.url}/relay`,
        relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: clientNetwork }),
      );
      expect(res.status).toBe(402);
      const body = (await res.json()) as { accepts: { scheme: string }[] };
      expect(body.accepts.map((entry) => entry.scheme)).toEqual(['exact']);
      const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
      expect(required.accepts.map((entry) => entry.scheme)).toEqual(['upto', 'exact']);
      expect(required.accepts[0]).toMatchObject({
        scheme: 'upto',
        amount: atomic(clientNetwork, MAX_TOTAL).toString(),
        payTo: service(),
        extra: { assetTransferMethod: 'permit2', facilitatorAddress: service() },
      });
    });

    describe.each(KINDS)('settling $kind', ({ kind, settles, charged }) => {
      it(`the upto client pays exactly what the target used plus the fee (${charged} micro-USDC), once, no refund`, async () => {
        const target = peers.targets[targetName(kind, network)]!;
        target.reset();
        const before = await legs(network, clientNetwork, target);
        const paying = clientFetch({ upto: true });

        const res = await paying.fetch(
          `${t.service.url}/relay`,
          relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: clientNetwork }),
        );

        expect(res.status, await res.clone().text()).toBe(200);
        expect(await res.json()).toEqual({ ok: true, route: 'paid', target: target.name, network });
        expect(paying.sent).toHaveLength(1);
        expect(decodeJsonHeader(paying.sent[0]!).accepted).toMatchObject({ scheme: 'upto' });
        const clientTx = res.headers.get('x-client-payment');
        expect(clientTx).toMatch(/^0x[0-9a-f]{64}$/);
        expect(decodeJsonHeader(res.headers.get('payment-response'))).toMatchObject({
          success: true,
          transaction: clientTx,
          amount: atomic(clientNetwork, charged).toString(),
        });
        expect(res.headers.get('x-refund-webhook-id')).toBeNull();

        const used = atomic(network, settles);
        const paid = atomic(clientNetwork, charged);
        expect(await legs(network, clientNetwork, target)).toEqual({
          client: before.client - paid,
          ours: before.ours + paid,
          ourTargetSide: before.ourTargetSide - used,
          target: before.target + used,
        });
        const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientTx);
        expect(row).toMatchObject({
          state: 'delivered',
          scheme: 'upto',
          amount_micro: MAX_TOTAL,
          maximum_atomic: atomic(clientNetwork, MAX_TOTAL).toString(),
          settled_atomic: paid.toString(),
          charged_micro: charged,
          refund_micro: null,
          target_scheme: 'upto',
          target_used_micro: settles,
        });
        expect(
          await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row!.id).execute(),
        ).toEqual([]);
        // What each leg's finality watch puts at risk is what moved on it, not the maxima.
        const watches = await db
          .selectFrom('finality_watches')
          .select(['leg', 'amount_micro_usdc', 'tx_hash'])
          .where('relay_transaction_id', '=', row!.id)
          .orderBy('leg')
          .execute();
        expect(
          watches.map(({ leg, amount_micro_usdc, tx_hash }) => ({ leg, amount: amount_micro_usdc, tx_hash })),
        ).toEqual([
          { leg: 'client_settlement', amount: charged, tx_hash: clientTx },
          { leg: 'target_payment', amount: settles, tx_hash: row!.target_tx_hash },
        ]);

        // The same permit for another call: refused as used, nothing moves (the same call again gets the kept answer).
        const again = await contractFetch()(
          `${t.service.url}/relay`,
          relayRequest(
            { api_url: target.routes.paidEcho.url, method: 'GET', network: clientNetwork },
            { 'payment-signature': paying.sent[0]! },
          ),
        );
        expect(again.status).toBe(400);
        expect(await again.json()).toMatchObject({ code: 'payment_reused' });
        expect(await peers.usdcBalance(clientNetwork, client())).toBe(before.client - paid);
      });
    });

    it('a client without upto still pays exact: the maximum plus the fee, the unused part refunded', async () => {
      const target = peers.targets[targetName('less', network)]!;
      target.reset();
      const before = await peers.usdcBalance(clientNetwork, client());
      const paying = clientFetch({ upto: false });
      const res = await paying.fetch(
        `${t.service.url}/relay`,
        relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: clientNetwork }),
      );
      expect(res.status).toBe(200);
      expect(decodeJsonHeader(paying.sent[0]!).accepted).toMatchObject({ scheme: 'exact' });
      const clientTx = res.headers.get('x-client-payment');
      const [row] = (await relayRows(db)).filter((candidate) => candidate.client_tx_hash === clientTx);
      expect(row).toMatchObject({ scheme: 'exact', amount_micro: MAX_TOTAL, refund_micro: MAX_TOTAL - USED_TOTAL });
      expect(res.headers.get('x-refund-webhook-id')).not.toBeNull();
      await expect
        .poll(() => peers.usdcBalance(clientNetwork, client()), { timeout: 30_000 })
        .toBe(before - atomic(clientNetwork, USED_TOTAL));
    });
  },
);

describe('on polygon-amoy', () => {
  it('an exact target is never offered upto', async () => {
    const target = peers.targets['exact-polygon-amoy']!;
    const res = await contractFetch()(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: 'base-sepolia' }),
    );
    expect(res.status).toBe(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required')!);
    expect(required.accepts.map((entry) => entry.scheme)).toEqual(['exact']);
  });

  it('a permit whose payer never approved Permit2 is refused with a 402 naming why; nothing moves', async () => {
    const target = peers.targets[targetName('less', 'polygon-amoy')]!;
    const key = generatePrivateKey();
    const payer = privateKeyToAccount(key);
    await peers.mint('base-sepolia', payer.address, 100_000n);
    const res = await wrapFetchWithPayment(contractFetch(), x402ClientV2(payer, { upto: true }))(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: 'base-sepolia' }),
    );
    expect(res.status).toBe(402);
    const body = (await res.json()) as { code: string; error: string };
    expect(body.code).toBe('payment_invalid');
    expect(body.error).toMatch(/^permit2_allowance_missing: /);
    expect(await peers.usdcBalance('base-sepolia', payer.address)).toBe(100_000n);
  });

  it('a target that fails leaves the permit unsettled: nothing is taken', async () => {
    const target = peers.targets[targetName('less', 'polygon-amoy')]!;
    target.reset();
    const before = await peers.usdcBalance('base-sepolia', client());
    const paying = clientFetch({ upto: true });
    const res = await paying.fetch(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target.routes.error.url, method: 'GET', network: 'base-sepolia' }),
    );
    expect(res.status).toBe(502);
    expect(paying.sent).toHaveLength(1);
    expect(res.headers.get('x-client-payment')).toBeNull();
    expect(await peers.usdcBalance('base-sepolia', client())).toBe(before);
    const rows = (await relayRows(db)).filter((row) => row.target_url === target.routes.error.url);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ scheme: 'upto', client_tx_hash: null, settled_atomic: null });
    expect(['received', 'settle_failed']).toContain(rows[0]!.state);
  });
});
