// The local peers end to end: unmodified x402-fetch pays unmodified x402-express, the facilitator
// settles on the local chains, and balances move by exactly the price; replays move nothing; a
// Solana payment settles through the JSON-RPC endpoint with the facilitator paying the fee.
import { createSolanaRpc, type Signature } from '@solana/kit';
import type { Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decodePaymentHeader,
  decodePaymentResponseHeader,
  EVM_NETWORKS,
  startPeers,
  type EvmNetworkName,
  type Peers,
  type PaymentRequiredBody,
  type SolanaNetworkName,
  type Target,
} from '../../devnet/index.js';
import { usdcAbi } from '../../devnet/evm/usdc.js';
import { ifStarted } from '../support/teardown';

const PRICE = 10_000n;

let peers: Peers;
let startupWallMs: number;

beforeAll(async () => {
  const started = performance.now();
  peers = await startPeers({ pricesMicroUsdc: { paid: PRICE } });
  startupWallMs = performance.now() - started;
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

async function paymentRequirementsOf(url: string): Promise<PaymentRequiredBody> {
  const response = await fetch(url);
  expect(response.status).toBe(402);
  return (await response.json()) as PaymentRequiredBody;
}

function paidRequests(target: Target) {
  return target.requests.filter((request) => request.route === 'paid' && request.payment !== null);
}

describe('start-up', () => {
  // How long start-up takes is printed, not asserted: on a loaded machine it is slower, not wrong.
  it('brings every peer up', () => {
    console.info(`startPeers: ${peers.startupMs} ms (wall clock in the test: ${Math.round(startupWallMs)} ms)`);
    expect(peers.networks).toEqual([
      'base',
      'base-sepolia',
      'skale-base',
      'skale-base-sepolia',
      'solana',
      'solana-devnet',
    ]);
    expect(Object.keys(peers.targets).sort()).toEqual(
      [...peers.networks, ...peers.networks.map((network) => `v2-${network}`)].sort(),
    );
  });

  it('runs each EVM chain with its real chain id', async () => {
    const expected: Record<string, number> = {
      base: 8453,
      'base-sepolia': 84532,
      'skale-base': 1187947933,
      'skale-base-sepolia': 324705682,
      polygon: 137,
    };
    for (const network of peers.evmNetworks) {
      expect(await peers.evmChains[network]!.publicClient.getChainId()).toBe(expected[network]);
    }
  });

  it('funds the wallets as documented', async () => {
    const { service, client } = peers.wallets;
    for (const network of peers.evmNetworks) {
      expect(await peers.usdcBalance(network, service.evm.address)).toBe(1_000_000_000n);
      expect(await peers.usdcBalance(network, client.evm.address)).toBe(100_000_000n);
      expect(await peers.nativeBalance(network, service.evm.address)).toBe(1_000n * 10n ** 18n);
      expect(await peers.nativeBalance(network, client.evm.address)).toBe(0n);
    }
    for (const network of peers.solanaNetworks) {
      expect(await peers.usdcBalance(network, service.solana.address)).toBe(1_000_000_000n);
      expect(await peers.usdcBalance(network, client.solana.address)).toBe(100_000_000n);
      expect(await peers.nativeBalance(network, service.solana.address)).toBe(100_000_000_000n);
      expect(await peers.nativeBalance(network, client.solana.address)).toBe(0n);
    }
  });
});

describe.each([
  { network: 'base-sepolia', layer: 'x402-express' },
  { network: 'skale-base-sepolia', layer: 'x402-express' },
] as const)('x402-fetch pays the $layer target on $network', ({ network, layer }) => {
  let settlement: ReturnType<typeof decodePaymentResponseHeader>;

  it('settles on chain and moves exactly the price', async () => {
    const target = peers.targets[network]!;
    expect(target.routes.paid.paymentLayer).toBe(layer);
    const payer = peers.wallets.client.evm.address;
    const payee = target.routes.paid.payTo;
    const [payerBefore, payeeBefore, payerGasBefore] = await Promise.all([
      peers.usdcBalance(network, payer),
      peers.usdcBalance(network, payee),
      peers.nativeBalance(network, payer),
    ]);

    const response = await peers.x402Fetch(network)(target.routes.paid.url);

    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ ok: true, route: 'paid', target: network, network });
    settlement = decodePaymentResponseHeader(response.headers.get('x-payment-response')!);
    expect(settlement).toMatchObject({ success: true, network, payer });
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore - PRICE);
    expect(await peers.usdcBalance(network, payee)).toBe(payeeBefore + PRICE);
    expect(await peers.nativeBalance(network, payer)).toBe(payerGasBefore);

    const chain = peers.evmChains[network as EvmNetworkName]!;
    const receipt = await chain.publicClient.getTransactionReceipt({ hash: settlement.transaction as Hash });
    expect(receipt.status).toBe('success');
    expect(receipt.from.toLowerCase()).toBe(peers.facilitator.evmAddress.toLowerCase());
  });

  it('refuses the same X-PAYMENT again and moves nothing', async () => {
    const target = peers.targets[network]!;
    const [paid] = paidRequests(target);
    const replayed = paid!.payment!;
    const { authorization } = decodePaymentHeader(replayed).payload as {
      authorization: { from: `0x${string}`; nonce: Hash };
    };
    const chain = peers.evmChains[network as EvmNetworkName]!;
    const used = await chain.publicClient.readContract({
      address: EVM_NETWORKS[network].usdc,
      abi: usdcAbi,
      functionName: 'authorizationState',
      args: [authorization.from, authorization.nonce],
    });
    expect(used).toBe(true);
    const payer = peers.wallets.client.evm.address;
    const payee = target.routes.paid.payTo;
    const [payerBefore, payeeBefore] = await Promise.all([
      peers.usdcBalance(network, payer),
      peers.usdcBalance(network, payee),
    ]);
    const settlementsBefore = peers.facilitator.calls.filter((call) => call.path === '/settle').length;

    const response = await fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': replayed } });

    expect(response.status).toBe(402);
    expect(((await response.json()) as PaymentRequiredBody).error).toBe('nonce_already_used');
    expect(response.headers.get('x-payment-response')).toBeNull();
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore);
    expect(await peers.usdcBalance(network, payee)).toBe(payeeBefore);
    expect(peers.facilitator.calls.filter((call) => call.path === '/settle')).toHaveLength(settlementsBefore);
  });
});

describe('skale-base (unknown to x402 1.2.0)', () => {
  it('is served by our own target and paid with a signed authorization; a replay moves nothing', async () => {
    const target = peers.targets['skale-base']!;
    expect(target.routes.paid.paymentLayer).toBe('own');
    const body = await paymentRequirementsOf(target.routes.paid.url);
    expect(body.accepts).toHaveLength(1);
    expect(body.accepts[0]).toMatchObject({
      network: 'skale-base',
      maxAmountRequired: PRICE.toString(),
      asset: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
      extra: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    });
    const payer = peers.wallets.client.evm.address;
    const payee = target.routes.paid.payTo;
    const payerBefore = await peers.usdcBalance('skale-base', payer);
    const payeeBefore = await peers.usdcBalance('skale-base', payee);
    const { header } = await peers.signEvmPayment(body.accepts[0]!);

    const paid = await fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': header } });
    expect(paid.status).toBe(200);
    expect(decodePaymentResponseHeader(paid.headers.get('x-payment-response')!)).toMatchObject({
      success: true,
      network: 'skale-base',
      payer,
    });

    const replay = await fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': header } });
    expect(replay.status).toBe(402);
    expect(((await replay.json()) as PaymentRequiredBody).error).toBe('nonce_already_used');
    expect(await peers.usdcBalance('skale-base', payer)).toBe(payerBefore - PRICE);
    expect(await peers.usdcBalance('skale-base', payee)).toBe(payeeBefore + PRICE);
  });

  it('makes x402-fetch reject the whole 402, as docs/decisions.md relies on', async () => {
    await expect(peers.x402Fetch('skale-base')(peers.targets['skale-base']!.routes.paid.url)).rejects.toThrow(
      /skale-base|invalid_enum_value/,
    );
  });
});

describe('two uses of one authorization at the same moment', () => {
  it('settle once: one 200, one 402, the price moves once', async () => {
    const network = 'base-sepolia';
    const target = peers.targets[network]!;
    const body = await paymentRequirementsOf(target.routes.paid.url);
    const { header } = await peers.signEvmPayment(body.accepts[0]!);
    const payer = peers.wallets.client.evm.address;
    const payerBefore = await peers.usdcBalance(network, payer);

    const responses = await Promise.all(
      [1, 2].map(() => fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': header } })),
    );

    expect(responses.map((response) => response.status).sort()).toEqual([200, 402]);
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore - PRICE);
  });
});

describe.each(['solana-devnet', 'solana'] as const)('Solana exact payment on %s', (network: SolanaNetworkName) => {
  it('settles through the JSON-RPC endpoint, the facilitator pays the fee, the payer holds no SOL', async () => {
    const target = peers.targets[network]!;
    expect(target.routes.paid.paymentLayer).toBe('x402-express');
    const payer = peers.wallets.client.solana.address;
    const payee = target.routes.paid.payTo;
    const feePayer = peers.facilitator.solanaFeePayer;
    const [payerBefore, payeeBefore, feePayerLamportsBefore] = await Promise.all([
      peers.usdcBalance(network, payer),
      peers.usdcBalance(network, payee),
      peers.nativeBalance(network, feePayer),
    ]);
    expect(await peers.nativeBalance(network, payer)).toBe(0n);

    const requirements = (await paymentRequirementsOf(target.routes.paid.url)).accepts[0]!;
    expect(requirements.extra).toEqual({ feePayer });
    const { header } = await peers.createSolanaPayment(requirements);
    const response = await fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': header } });

    expect(response.status).toBe(200);
    const settlement = decodePaymentResponseHeader(response.headers.get('x-payment-response')!);
    expect(settlement).toMatchObject({ success: true, network, payer });
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore - PRICE);
    expect(await peers.usdcBalance(network, payee)).toBe(payeeBefore + PRICE);
    expect(await peers.nativeBalance(network, payer)).toBe(0n);
    // Two signatures at 5,000 lamports, and a priority fee of 1 micro-lamport x 20,000 units, rounded up.
    expect(await peers.nativeBalance(network, feePayer)).toBe(feePayerLamportsBefore - 10_001n);

    const rpc = createSolanaRpc(peers.rpcUrls[network]!);
    const { value: statuses } = await rpc.getSignatureStatuses([settlement.transaction as Signature]).send();
    expect(statuses[0]).toMatchObject({ err: null, confirmationStatus: 'finalized' });

    const replay = await fetch(target.routes.paid.url, { headers: { 'X-PAYMENT': header } });
    expect(replay.status).toBe(402);
    expect(((await replay.json()) as PaymentRequiredBody).error).toBe('duplicate_settlement');
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore - PRICE);
  });

  it('is also paid by the reference client, x402-fetch, against the local RPC', async () => {
    const target = peers.targets[network]!;
    const payer = peers.wallets.client.solana.address;
    const payerBefore = await peers.usdcBalance(network, payer);

    const response = await peers.x402Fetch(network)(target.routes.paid.url);

    expect(response.status).toBe(200);
    expect(decodePaymentResponseHeader(response.headers.get('x-payment-response')!)).toMatchObject({
      success: true,
      network,
      payer,
    });
    expect(await peers.usdcBalance(network, payer)).toBe(payerBefore - PRICE);
  });
});

describe('the two Solana clusters are separate ledgers', () => {
  it('refuses a devnet payment offered to the mainnet target and moves nothing', async () => {
    const devnetRequirements = (await paymentRequirementsOf(peers.targets['solana-devnet']!.routes.paid.url))
      .accepts[0]!;
    const { header } = await peers.createSolanaPayment(devnetRequirements);
    const payer = peers.wallets.client.solana.address;
    const before = await Promise.all([peers.usdcBalance('solana', payer), peers.usdcBalance('solana-devnet', payer)]);

    const response = await fetch(peers.targets.solana!.routes.paid.url, { headers: { 'X-PAYMENT': header } });

    expect(response.status).toBe(402);
    expect(await Promise.all([peers.usdcBalance('solana', payer), peers.usdcBalance('solana-devnet', payer)])).toEqual(
      before,
    );
  });
});
