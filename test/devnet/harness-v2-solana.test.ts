// The Solana half of the x402 version 2 peers: the v2 facilitator (@x402/core's x402Facilitator)
// serves @x402/svm's exact scheme on both local clusters through our JSON-RPC endpoint, with its own
// funded fee payer, listed in /supported as `extra.feePayer`; the v2 Solana targets are served by
// unmodified @x402/express 2.27 with @x402/svm's exact server scheme; unmodified @x402/fetch 2.27
// with @x402/svm's exact client pays them on the local ledger, balances moving by exactly the
// price, and a replayed payment moves nothing.
import type { Address } from '@solana/kit';
import {
  decompileTransactionMessage,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
} from '@solana/kit';
import { COMPUTE_BUDGET_PROGRAM_ADDRESS } from '@solana-program/compute-budget';
import { TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { x402Client } from '@x402/core/client';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { wrapFetchWithPayment } from '@x402/fetch';
import { ExactSvmScheme } from '@x402/svm/exact/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CAIP2_NETWORKS,
  SOLANA_NETWORKS,
  startPeers,
  v2TargetName,
  type Peers,
  type PaymentRequirements,
  type SolanaNetworkName,
  type Target,
} from '../../devnet/index.js';
import { generateSolanaKey } from '../../devnet/svm/keys.js';
import { ifStarted } from '../support/teardown';
import { expectOneV2PaidCall, expectV2Offer, v2Settles, verifyV1WithFacilitatorV2 } from '../support/v2-peers';

const PRICE = 10_000n;
const CLUSTERS: SolanaNetworkName[] = ['solana', 'solana-devnet'];
const MEMO_PROGRAM = 'MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr';

let peers: Peers;

beforeAll(async () => {
  peers = await startPeers({ networks: [...CLUSTERS, 'base-sepolia'], pricesMicroUsdc: { paid: PRICE } });
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

const v2Target = (network: SolanaNetworkName): Target => peers.targets[v2TargetName(network)]!;
const settles = () => v2Settles(peers);

describe('the v2 facilitator on Solana', () => {
  it('lists a v2 kind per cluster (CAIP-2) and the v1 names, each with its own fee payer in extra, and that signer', async () => {
    const supported = (await (await fetch(`${peers.facilitatorV2.url}/supported`)).json()) as {
      kinds: { x402Version: number; scheme: string; network: string; extra?: Record<string, unknown> }[];
      signers: Record<string, string[]>;
    };
    const feePayer = peers.facilitatorV2.solanaFeePayer;
    expect(feePayer).not.toBe(peers.facilitator.solanaFeePayer);
    const solanaKinds = supported.kinds.filter((kind) => kind.network.startsWith('solana'));
    expect(solanaKinds).toEqual(
      expect.arrayContaining([
        ...CLUSTERS.map((network) => ({
          x402Version: 2,
          scheme: 'exact',
          network: CAIP2_NETWORKS[network],
          extra: { feePayer },
        })),
        ...CLUSTERS.map((network) => ({ x402Version: 1, scheme: 'exact', network, extra: { feePayer } })),
      ]),
    );
    expect(solanaKinds).toHaveLength(4);
    expect(supported.signers['solana:*']).toEqual([feePayer]);
    // Its fee payer holds SOL on both clusters; the EVM kinds are still there.
    for (const network of CLUSTERS) expect(await peers.nativeBalance(network, feePayer)).toBe(100_000_000_000n);
    expect(supported.kinds.some((kind) => kind.network === CAIP2_NETWORKS['base-sepolia'])).toBe(true);
  });

  it('verifies a v1 Solana payment under its v1 kind, against the local cluster', async () => {
    const requirements: PaymentRequirements = {
      scheme: 'exact',
      network: 'solana-devnet',
      maxAmountRequired: PRICE.toString(),
      resource: 'http://127.0.0.1/paid',
      description: 'v1 under the v2 facilitator',
      mimeType: 'application/json',
      payTo: peers.wallets.target.solana.address,
      maxTimeoutSeconds: 60,
      asset: SOLANA_NETWORKS['solana-devnet'].usdc,
      extra: { feePayer: peers.facilitatorV2.solanaFeePayer },
    };
    const { payment } = await peers.createSolanaPayment(requirements);
    const response = await verifyV1WithFacilitatorV2(peers, payment, requirements);
    expect(await response.json()).toEqual({ isValid: true, payer: peers.wallets.client.solana.address });
  });
});

describe('the v2 Solana targets', () => {
  it('are named v2-<cluster>, served by @x402/express 2.27, paid into the target wallet', () => {
    for (const network of CLUSTERS) {
      const target = v2Target(network);
      expect(target).toMatchObject({ network, x402Version: 2, payTo: peers.wallets.target.solana.address });
      expect(target.routes.paid.paymentLayer).toBe('@x402/express');
      expect(peers.targets[network]!.x402Version).toBe(1);
    }
  });

  it.each(CLUSTERS)(
    'on %s ask in PAYMENT-REQUIRED with the CAIP-2 id, the USDC mint, the price and the facilitator fee payer',
    async (network) => {
      const target = v2Target(network);
      await expectV2Offer(target, {
        scheme: 'exact',
        network: CAIP2_NETWORKS[network],
        amount: PRICE.toString(),
        asset: SOLANA_NETWORKS[network].usdc,
        payTo: target.payTo,
        maxTimeoutSeconds: 60,
        extra: { feePayer: peers.facilitatorV2.solanaFeePayer },
      });
    },
  );
});

describe.each(CLUSTERS)('@x402/fetch 2.27 with @x402/svm pays the @x402/express 2.27 target on %s', (network) => {
  it('settles on the local ledger through the v2 facilitator, moving exactly the price; a replay moves nothing', async () => {
    const target = v2Target(network);
    target.reset();
    const ledger = peers.solanaLedgers[network]!;
    const payer = peers.wallets.client.solana.address;
    const feePayer = peers.facilitatorV2.solanaFeePayer;
    const balances = () => Promise.all([peers.usdcBalance(network, payer), peers.usdcBalance(network, target.payTo)]);
    const [payerBefore, payeeBefore] = await balances();
    const feePayerSolBefore = await peers.nativeBalance(network, feePayer);
    const settlesBefore = settles().length;

    const response = await peers.x402FetchV2({ solana: true })(target.routes.paid.url);

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ ok: true, route: 'paid', target: target.name, network });
    const settlement = decodePaymentResponseHeader(response.headers.get('payment-response')!);
    expect(settlement).toMatchObject({ success: true, network: CAIP2_NETWORKS[network], payer });
    expect(await balances()).toEqual([payerBefore - PRICE, payeeBefore + PRICE]);

    // On the ledger: executed without error, the fee paid by the facilitator's key, none by the client.
    const executed = ledger.executedTransaction(settlement.transaction)!;
    expect(executed.err).toBeNull();
    expect(await peers.nativeBalance(network, feePayer)).toBe(feePayerSolBefore - executed.fee);
    expect(await peers.nativeBalance(network, payer)).toBe(0n);
    // @x402/svm's client shape: compute limit, compute price, TransferChecked, Memo; our fee payer first.
    const message = decompileTransactionMessage(
      getCompiledTransactionMessageDecoder().decode(
        getTransactionDecoder().decode(getBase64Encoder().encode(executed.wireTransactionBase64)).messageBytes,
      ),
    );
    expect(message.feePayer.address).toBe(feePayer);
    expect(Array.from(message.instructions, (instruction) => instruction.programAddress)).toEqual([
      COMPUTE_BUDGET_PROGRAM_ADDRESS,
      COMPUTE_BUDGET_PROGRAM_ADDRESS,
      TOKEN_PROGRAM_ADDRESS,
      MEMO_PROGRAM,
    ]);

    const { header, payment } = expectOneV2PaidCall(peers, target, response, CAIP2_NETWORKS[network], settlesBefore);
    expect(payment.accepted).toMatchObject({ network: CAIP2_NETWORKS[network], extra: { feePayer } });

    const replay = await fetch(target.routes.paid.url, { headers: { 'PAYMENT-SIGNATURE': header } });
    expect(replay.status).toBe(402);
    expect(await balances()).toEqual([payerBefore - PRICE, payeeBefore + PRICE]);
    expect(await peers.nativeBalance(network, feePayer)).toBe(feePayerSolBefore - executed.fee);
  });
});

describe('the v2 target on solana-devnet', () => {
  const network = 'solana-devnet';

  it('is paid by a client built by hand: x402Client.register(<CAIP-2>, new ExactSvmScheme(signer, {rpcUrl})) and wrapFetchWithPayment', async () => {
    const target = v2Target(network);
    const client = new x402Client().register(
      CAIP2_NETWORKS[network],
      new ExactSvmScheme(peers.wallets.client.solana.signer, { rpcUrl: peers.rpcUrls[network]! }),
    );
    const payFetch = wrapFetchWithPayment(fetch, client);
    const before = await peers.usdcBalance(network, target.payTo);

    const response = await payFetch(`${target.routes.paidEcho.url}?q=1`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'hello v2 solana',
    });

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ method: 'POST', path: '/paid/echo', body: 'hello v2 solana' });
    expect(await peers.usdcBalance(network, target.payTo)).toBe(before + PRICE);
  });

  it('a payment signed for solana-devnet does not pay the target on solana', async () => {
    const devnetTarget = v2Target(network);
    devnetTarget.reset();
    const payFetch = peers.x402FetchV2({ solana: true });
    const paid = await payFetch(devnetTarget.routes.paid.url);
    expect(paid.status).toBe(200);
    const header = devnetTarget.requests.find((request) => request.payment !== null)!.payment!;
    const mainnetTarget = v2Target('solana');
    const before = await Promise.all(CLUSTERS.map((cluster) => peers.usdcBalance(cluster, mainnetTarget.payTo)));

    const response = await fetch(mainnetTarget.routes.paid.url, { headers: { 'PAYMENT-SIGNATURE': header } });

    expect(response.status).toBe(402);
    expect(await Promise.all(CLUSTERS.map((cluster) => peers.usdcBalance(cluster, mainnetTarget.payTo)))).toEqual(
      before,
    );
  });

  it('a payer without USDC is refused at verification and nothing moves', async () => {
    const broke = await generateSolanaKey();
    const target = v2Target(network);
    const before = await peers.usdcBalance(network, target.payTo);
    const settlesBefore = settles().length;

    const response = await peers.x402FetchV2({ solana: true, secretKey: broke.secretKey })(target.routes.paid.url);

    expect(response.status).toBe(402);
    expect(await peers.usdcBalance(network, target.payTo)).toBe(before);
    expect(settles()).toHaveLength(settlesBefore);
    const verify = peers.facilitatorV2.calls.at(-1)!;
    expect(verify).toMatchObject({ path: '/verify', answer: { isValid: false } });
    expect(verify.answer).toHaveProperty('invalidReason', 'invalid_exact_svm_transaction_simulation_failed');
    expect((verify.answer as { payer?: Address }).payer).toBe(broke.address);
  });
});
