// POST /relay paid on solana-devnet by the standard clients (x402's v0 payment with a Memo, and
// the legacy transaction HTTPayer's SDK builds), settled directly and through the facilitator: the
// target is paid once and every leg moves exactly. The domain side of these payments is
// test/devnet/relay-payment-solana.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import type { PaymentRequirements } from '../../payments/x402/types';
import { legacyTransfer } from '../support/httpayer-sdk';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'solana-devnet' as const;
const PRICE_MICRO_USDC = 10_300n;

let peers: Peers;
const service = () => peers.wallets.service.solana.address;

/** A legacy payment as HTTPayer's Python SDK builds it (solders' account order, limit 50,000, price 1). */
async function httpayerPayment(requirements: PaymentRequirements, signer = peers.wallets.client.solana.signer) {
  const transaction = await legacyTransfer({ signer, rpcUrl: peers.rpcUrls[NETWORK]! }, requirements);
  const payment = { x402Version: 1, scheme: 'exact', network: requirements.network, payload: { transaction } };
  return { transaction, header: Buffer.from(JSON.stringify(payment)).toString('base64') };
}

describe('POST /relay paid on solana-devnet by the standard clients', () => {
  const TARGET_PRICE = 10_000n;
  let t: TestService;
  let viaFacilitatorService: TestService;
  // A wallet of its own: HTTPayer's transactions are fixed but for the fee payer, so the peers' client's would repeat.
  let payer: SolanaKey;

  beforeAll(async () => {
    peers = await startPeers({ networks: [NETWORK] });
    payer = await generateSolanaKey();
    await peers.mint(NETWORK, payer.address, 1_000_000n);
    [t, viaFacilitatorService] = await Promise.all([
      startProxyService(peers),
      startProxyService(peers, { FACILITATOR_URL: peers.facilitator.url }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([ifStarted(t)?.stop(), ifStarted(viaFacilitatorService)?.stop()]);
    await ifStarted(peers)?.stop();
  });

  async function legs() {
    return {
      client: await peers.usdcBalance(NETWORK, payer.address),
      clientLamports: await peers.nativeBalance(NETWORK, payer.address),
      service: await peers.usdcBalance(NETWORK, service()),
      target: await peers.usdcBalance(NETWORK, peers.targets[NETWORK]!.routes.paid.payTo),
    };
  }
  const payMemo = (memo: string) => async (requirements: PaymentRequirements) =>
    peers.createSolanaPayment(requirements, { memo }, payer.secretKey);
  const payHttpayer = (requirements: PaymentRequirements) => httpayerPayment(requirements, payer.signer);

  it("pays the target once for a v0 payment with x402's Memo and for a legacy one as HTTPayer builds it, directly and through the facilitator", async () => {
    const body = { api_url: peers.targets[NETWORK]!.routes.paid.url, method: 'GET', network: NETWORK };
    const clients: Array<[string, TestService, (requirements: PaymentRequirements) => Promise<{ header: string }>]> = [
      ['v0 with a Memo, direct', t, payMemo('a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5')],
      ['legacy as HTTPayer builds it, direct', t, payHttpayer],
      ['v0 with a Memo, through the facilitator', viaFacilitatorService, payMemo('f5e4d3c2b1a0')],
      ['legacy as HTTPayer builds it, through the facilitator', viaFacilitatorService, payHttpayer],
    ];
    for (const [kind, service, payWith] of clients) {
      const first = await service.client.post('/relay', body);
      expect(first.status, kind).toBe(402);
      const requirements = (first.body.accepts as PaymentRequirements[]).find((entry) => entry.network === NETWORK)!;
      expect(requirements.maxAmountRequired, kind).toBe(PRICE_MICRO_USDC.toString());
      const { header } = await payWith(requirements);
      const before = await legs();
      const res = await service.client.post('/relay', body, { headers: { 'X-PAYMENT': header } });
      expect({ kind, status: res.status }).toEqual({ kind, status: 200 });
      expect(res.body, kind).toEqual({ ok: true, route: 'paid', target: NETWORK, network: NETWORK });
      const after = await legs();
      expect(
        { client: after.client, service: after.service, target: after.target, clientLamports: after.clientLamports },
        kind,
      ).toEqual({
        client: before.client - PRICE_MICRO_USDC,
        service: before.service + PRICE_MICRO_USDC - TARGET_PRICE,
        target: before.target + TARGET_PRICE,
        clientLamports: 0n,
      });
    }
  });
});
