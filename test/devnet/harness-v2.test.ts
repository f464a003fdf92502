// The x402 version 2 peers: the v2 facilitator (@x402/core's x402Facilitator with @x402/evm's exact,
// upto and batch-settlement schemes) lists CAIP-2 kinds, and unmodified @x402/fetch 2.27 pays targets served by unmodified
// @x402/express 2.27 on every EVM network, settled on the local chains with balances moving by
// exactly the price; a replayed payment and a target that never settles move nothing.
import { x402Client } from '@x402/core/client';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { getAddress, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  startPeers,
  v2TargetName,
  type EvmNetworkName,
  type Peers,
  type PaymentRequiredBody,
  type Target,
} from '../../devnet/index.js';
import { ifStarted } from '../support/teardown';
import { expectOneV2PaidCall, expectV2Offer, v2Settles, verifyV1WithFacilitatorV2 } from '../support/v2-peers';

const PRICE = 10_000n;
const NETWORKS: EvmNetworkName[] = ['base', 'base-sepolia', 'skale-base', 'skale-base-sepolia'];

let peers: Peers;

beforeAll(async () => {
  peers = await startPeers({ networks: [...NETWORKS, 'solana-devnet'], pricesMicroUsdc: { paid: PRICE } });
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

const v2Target = (network: EvmNetworkName): Target => peers.targets[v2TargetName(network)]!;

async function receiptStatus(network: EvmNetworkName, transaction: string): Promise<string> {
  const receipt = await peers.evmChains[network]!.publicClient.getTransactionReceipt({ hash: transaction as Hash });
  return receipt.status;
}

describe('the v2 facilitator', () => {
  it('lists a v2 kind with the CAIP-2 id of every EVM network, v1 kinds where @x402/evm knows the name, and its signer', async () => {
    const response = await fetch(`${peers.facilitatorV2.url}/supported`);
    expect(response.status).toBe(200);
    const supported = (await response.json()) as {
      kinds: { x402Version: number; scheme: string; network: string }[];
      extensions: string[];
      signers: Record<string, string[]>;
    };
    const v2 = supported.kinds.filter((kind) => kind.x402Version === 2);
    // The Solana kinds (solana-devnet is running too) are tested in harness-v2-solana.test.ts.
    const networksOf = (scheme: string) =>
      v2
        .filter((kind) => kind.scheme === scheme)
        .map((kind) => kind.network)
        .sort();
    expect(networksOf('exact')).toEqual(
      [...NETWORKS.map((network) => CAIP2_NETWORKS[network]), CAIP2_NETWORKS['solana-devnet']].sort(),
    );
    // upto on every EVM network (test/devnet/permit2.test.ts pays it).
    expect(networksOf('upto')).toEqual(NETWORKS.map((network) => CAIP2_NETWORKS[network]).sort());
    // batch-settlement on every EVM network (test/devnet/batch-settlement-target.test.ts pays it).
    expect(networksOf('batch-settlement')).toEqual(NETWORKS.map((network) => CAIP2_NETWORKS[network]).sort());
    expect(v2).toHaveLength(3 * NETWORKS.length + 1);
    expect(
      supported.kinds
        .filter((kind) => kind.x402Version === 1)
        .map((kind) => kind.network)
        .sort(),
    ).toEqual(['base', 'base-sepolia', 'skale-base-sepolia', 'solana-devnet']);
    expect(supported.signers['eip155:*']).toEqual([peers.facilitatorV2.evmAddress]);
    expect(peers.facilitatorV2.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('answers a body that is not a facilitator request with a 400', async () => {
    const response = await fetch(`${peers.facilitatorV2.url}/verify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ paymentPayload: 'nope' }),
    });
    expect(response.status).toBe(400);
  });

  it('verifies a v1 payment under a v1 kind it lists', async () => {
    const unpaid = await fetch(peers.targets['base-sepolia']!.routes.paid.url);
    const [requirements] = ((await unpaid.json()) as PaymentRequiredBody).accepts;
    const { payment } = await peers.signEvmPayment(requirements!);
    const response = await verifyV1WithFacilitatorV2(peers, payment, requirements);
    expect(await response.json()).toMatchObject({ isValid: true, payer: peers.wallets.client.evm.address });
  });
});

describe('the v2 targets', () => {
  it('are named v2-<network>, one per network, beside the v1 targets', () => {
    expect(Object.keys(peers.targets).sort()).toEqual(
      [...peers.networks, ...peers.networks.map((network) => `v2-${network}`)].sort(),
    );
    for (const network of NETWORKS) {
      const target = v2Target(network);
      expect(target).toMatchObject({ network, x402Version: 2, payTo: peers.wallets.target.evm.address });
      expect(target.routes.paid.paymentLayer).toBe('@x402/express');
      expect(target.routes.free.paymentLayer).toBeNull();
      expect(peers.targets[network]!.x402Version).toBe(1);
    }
    expect(peers.targets['solana-devnet']!.x402Version).toBe(1);
    expect(peers.targets['v2-solana-devnet']!.x402Version).toBe(2);
  });

  it.each(NETWORKS)(
    'on %s asks in a PAYMENT-REQUIRED header with the CAIP-2 id, the exact price and USDC',
    async (network) => {
      const target = v2Target(network);
      await expectV2Offer(target, {
        scheme: 'exact',
        network: CAIP2_NETWORKS[network],
        amount: PRICE.toString(),
        asset: getAddress(EVM_NETWORKS[network].usdc),
        payTo: getAddress(target.payTo),
        maxTimeoutSeconds: 60,
        extra: { name: EVM_NETWORKS[network].eip712.name, version: EVM_NETWORKS[network].eip712.version },
      });
    },
  );
});

describe.each(NETWORKS)('@x402/fetch 2.27 (v2 only) pays the @x402/express 2.27 target on %s', (network) => {
  it('settles on chain through the v2 facilitator and moves exactly the price; a replay moves nothing', async () => {
    const target = v2Target(network);
    target.reset();
    const payer = peers.wallets.client.evm.address;
    const balances = () => Promise.all([peers.usdcBalance(network, payer), peers.usdcBalance(network, target.payTo)]);
    const [payerBefore, payeeBefore] = await balances();
    const settlesBefore = v2Settles(peers).length;

    const response = await peers.x402FetchV2()(target.routes.paid.url);

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ ok: true, route: 'paid', target: target.name });
    const settlement = decodePaymentResponseHeader(response.headers.get('payment-response')!);
    expect(settlement).toMatchObject({ success: true, network: CAIP2_NETWORKS[network], payer });
    expect(await receiptStatus(network, settlement.transaction)).toBe('success');
    expect(await balances()).toEqual([payerBefore - PRICE, payeeBefore + PRICE]);
    expect(await peers.nativeBalance(network, payer)).toBe(0n);

    // The target recorded the PAYMENT-SIGNATURE it got and the PAYMENT-RESPONSE it sent.
    const { header, payment } = expectOneV2PaidCall(peers, target, response, CAIP2_NETWORKS[network], settlesBefore);
    expect(payment.accepted.network).toBe(CAIP2_NETWORKS[network]);

    const replay = await fetch(target.routes.paid.url, { headers: { 'PAYMENT-SIGNATURE': header } });
    expect(replay.status).toBe(402);
    expect(await balances()).toEqual([payerBefore - PRICE, payeeBefore + PRICE]);
  });
});

describe('the v2 target on base-sepolia', () => {
  const network = 'base-sepolia';

  it("is paid by a client built by hand: x402Client.register('eip155:*', ExactEvmScheme) and wrapFetchWithPayment", async () => {
    const target = v2Target(network);
    const client = new x402Client().register('eip155:*', new ExactEvmScheme(peers.wallets.client.evm.account));
    const payFetch = wrapFetchWithPayment(fetch, client);
    const before = await peers.usdcBalance(network, target.payTo);

    const response = await payFetch(`${target.routes.paidEcho.url}?q=1`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'hello v2',
    });

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({
      method: 'POST',
      path: '/paid/echo',
      query: { q: '1' },
      body: 'hello v2',
      contentType: 'text/plain',
    });
    expect(await peers.usdcBalance(network, target.payTo)).toBe(before + 10_000n);
  });

  it('never settles on /never-settles: 402 again with the same offer, and nothing moves', async () => {
    const target = v2Target(network);
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance(network, payer);
    const settles = peers.facilitatorV2.calls.filter((call) => call.path === '/settle').length;

    const response = await peers.x402FetchV2()(target.routes.neverSettles.url);

    expect(response.status).toBe(402);
    const required = decodePaymentRequiredHeader(response.headers.get('payment-required')!);
    expect(required.accepts[0]).toMatchObject({ network: CAIP2_NETWORKS[network], amount: '10000' });
    expect(await peers.usdcBalance(network, payer)).toBe(before);
    expect(peers.facilitatorV2.calls.filter((call) => call.path === '/settle')).toHaveLength(settles);
  });

  it('settles nothing when the route answers an error after verification', async () => {
    const target = v2Target(network);
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance(network, payer);

    const response = await peers.x402FetchV2()(target.routes.error.url);

    expect(response.status).toBe(500);
    expect(await peers.usdcBalance(network, payer)).toBe(before);
  });
});
