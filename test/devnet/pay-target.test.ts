// The paying side end to end against the harness's x402-protected targets: fetch unpaid -> 402 ->
// parse -> choose -> sign (EVM) or build (Solana) -> retry with X-PAYMENT -> 200 with
// X-PAYMENT-RESPONSE, and on-chain balances moved by exactly the price. Targets on base-sepolia and
// both Solana clusters run unmodified x402-express; skale-base-sepolia runs the harness's own layer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Chains } from '../../payments/chains/index';
import { NETWORK_TABLE, type NetworkName } from '../../payments/basics/networkTable';
import { chooseRequirement } from '../../payments/x402/choose';
import { decodePaymentHeader, decodePaymentResponseHeader } from '../../payments/x402/headers';
import { readTargetPaymentRequired } from '../../payments/x402/parse';
import { startPeers, type Peers } from '../../devnet/index';
import { createPeerChains } from '../support/chains';
import { ifStarted } from '../support/teardown';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const PRICE_MICRO_USDC = 12_345n;
const CEILING_MICRO_USDC = 50_000n;
const NETWORKS = ['base-sepolia', 'skale-base-sepolia', 'solana-devnet', 'solana'] as const;

let peers: Peers;
let chains: Chains;

beforeAll(async () => {
  peers = await startPeers({ networks: [...NETWORKS], pricesMicroUsdc: { paid: PRICE_MICRO_USDC } });
  chains = await createPeerChains(peers, NETWORKS);
});

afterAll(async () => {
  await ifStarted(chains)?.close();
  await ifStarted(peers)?.stop();
});

function serviceAddress(network: NetworkName): string {
  return NETWORK_TABLE[network].chainType === 'evm'
    ? peers.wallets.service.evm.address
    : peers.wallets.service.solana.address;
}

/** The paying flow, with plain fetch to the local target. */
async function payTarget(url: string, maxAmountMicroUsdc = CEILING_MICRO_USDC) {
  const unpaid = await fetch(url);
  expect(unpaid.status).toBe(402);
  const parsed = readTargetPaymentRequired(undefined, await unpaid.text());
  if (!parsed) throw new Error('402 body refused');
  expect(parsed.skipped).toEqual([]);
  const choice = chooseRequirement(parsed.accepts, {
    schemes: PAYMENT_SCHEMES,
    networks: chains.payingNetworks(),
    maxAmountMicroUsdc,
  });
  if (!choice.ok) return { choice, paid: undefined };
  const prepared = await chains.createPayment(choice.value, { now: new Date() });
  if (!prepared.ok) throw new Error(`payment not prepared: ${prepared.reason}: ${prepared.details}`);
  const paid = await fetch(url, { headers: { 'X-PAYMENT': prepared.value.header } });
  return { choice, prepared: prepared.value, paid };
}

describe.each(NETWORKS)('paying a %s target', (network) => {
  it('answers 200 after payment; balances move by exactly the price; the settlement is on chain', async () => {
    const target = peers.targets[network]!;
    const payTo = target.routes.paid.payTo;
    const before = {
      service: await peers.usdcBalance(network, serviceAddress(network)),
      target: await peers.usdcBalance(network, payTo),
      serviceNative: await peers.nativeBalance(network, serviceAddress(network)),
    };

    const { choice, prepared, paid } = await payTarget(target.routes.paid.url);
    expect(choice.ok && choice.value).toMatchObject({ network, amountMicroUsdc: PRICE_MICRO_USDC });
    expect(paid!.status).toBe(200);
    expect(await paid!.json()).toMatchObject({ ok: true, route: 'paid', network });

    // The target received exactly our header, and it decodes as the payment we built.
    const received = target.requests.filter(
      (request) => request.route === 'paid' && request.payment === prepared!.header,
    );
    expect(received).toHaveLength(1);
    expect(decodePaymentHeader(prepared!.header, PAYMENT_SCHEMES)).toEqual({ ok: true, value: prepared!.payment });

    const settlement = decodePaymentResponseHeader(paid!.headers.get('x-payment-response'));
    expect(settlement).toEqual({
      ok: true,
      value: { success: true, transaction: expect.any(String), network, payer: serviceAddress(network) },
    });
    if (!settlement.ok) return;
    expect(settlement.value.transaction).not.toBe('');

    expect(await peers.usdcBalance(network, serviceAddress(network))).toBe(before.service - PRICE_MICRO_USDC);
    expect(await peers.usdcBalance(network, payTo)).toBe(before.target + PRICE_MICRO_USDC);
    // Our wallet paid no gas and no fee: the facilitator did.
    expect(await peers.nativeBalance(network, serviceAddress(network))).toBe(before.serviceNative);

    if (NETWORK_TABLE[network].chainType === 'evm') {
      const use = await chains.evm.findAuthorizationUse(network, serviceAddress(network), prepared!.reference);
      expect(use).toEqual({
        ok: true,
        value: { state: 'settled', transactionHash: settlement.value.transaction, blockNumber: expect.any(BigInt) },
      });
    } else {
      const status = await chains.svm.waitForSignature(network, settlement.value.transaction, {
        timeoutMs: 5_000,
        pollMs: 20,
      });
      expect(status).toMatchObject({ ok: true, value: { kind: 'found', failed: false } });
    }
    const ourBalance = network.startsWith('solana')
      ? await chains.svm.usdcBalance(network, serviceAddress(network))
      : await chains.evm.usdcBalance(network, serviceAddress(network));
    expect(ourBalance).toEqual({ ok: true, value: before.service - PRICE_MICRO_USDC });
  });

  it('pays the same price to the same target again, as a second distinct payment', async () => {
    const target = peers.targets[network]!;
    const payTo = target.routes.paid.payTo;
    const before = await peers.usdcBalance(network, payTo);
    const first = await payTarget(target.routes.paid.url);
    const second = await payTarget(target.routes.paid.url);
    expect([first.paid!.status, second.paid!.status]).toEqual([200, 200]);
    expect(second.prepared!.header).not.toBe(first.prepared!.header);
    expect(await peers.usdcBalance(network, payTo)).toBe(before + 2n * PRICE_MICRO_USDC);
  });

  it('pays nothing when the price is over the ceiling', async () => {
    const target = peers.targets[network]!;
    const before = await peers.usdcBalance(network, serviceAddress(network));
    const { choice, paid } = await payTarget(target.routes.paid.url, PRICE_MICRO_USDC - 1n);
    expect(paid).toBeUndefined();
    expect(choice).toMatchObject({
      ok: false,
      reason: 'no_payable_requirement',
      refusals: [{ reason: 'amount_over_ceiling' }],
    });
    expect(await peers.usdcBalance(network, serviceAddress(network))).toBe(before);
  });
});

describe('our balance before signing', () => {
  it('is read once, then payments within what was read less what was signed since need no new read', async () => {
    const { signTargetPayment, BALANCE_FRESH_MS, WalletBalances } = await import('../../payments/outgoing/pay');
    const unpaid = await fetch(peers.targets['base-sepolia']!.routes.paid.url);
    const parsed = readTargetPaymentRequired(undefined, await unpaid.text());
    if (!parsed) throw new Error('402 body refused');
    const choice = chooseRequirement(parsed.accepts, {
      schemes: PAYMENT_SCHEMES,
      networks: chains.payingNetworks(),
      maxAmountMicroUsdc: CEILING_MICRO_USDC,
    });
    if (!choice.ok) throw new Error(choice.details);
    const balance = await peers.usdcBalance('base-sepolia', peers.wallets.service.evm.address);
    const reads: bigint[] = [];
    const read = chains.evm.usdcBalance.bind(chains.evm);
    const counted: Chains = {
      ...chains,
      evm: {
        ...chains.evm,
        usdcBalance: async (...args: Parameters<typeof read>) => {
          const result = await read(...args);
          if (result.ok) reads.push(result.value);
          return result;
        },
      },
    };
    let now = Date.now();
    // An EIP-3009 payment needs no standing approval: the database and the submission queue stay unused.
    const deps = {
      chains: counted,
      clock: { now: () => new Date(now) },
      balances: new WalletBalances(),
      db: undefined as never,
      submissions: undefined as never,
      paymentBounds: undefined as never,
    };
    const sign = (amount: bigint) =>
      signTargetPayment(
        deps,
        {
          ...choice.value,
          amountMicroUsdc: amount,
          requirements: { ...choice.value.requirements, maxAmountRequired: String(amount) },
        },
        { windowSeconds: 60 },
      );

    expect((await sign(PRICE_MICRO_USDC)).ok).toBe(true);
    expect((await sign(PRICE_MICRO_USDC)).ok).toBe(true);
    expect(reads).toEqual([balance]);
    // More than is left of what was read less the two payments: read again, and decided on what the chain says.
    expect((await sign(balance - PRICE_MICRO_USDC)).ok).toBe(true);
    expect(reads).toEqual([balance, balance]);
    const over = await sign(balance + 1n);
    expect(reads).toEqual([balance, balance, balance]);
    expect(over).toMatchObject({ ok: false, reason: 'insufficient_funds', targetSide: false });
    // Nothing is left of the last reading after a refusal; a reading older than BALANCE_FRESH_MS is never trusted.
    expect((await sign(PRICE_MICRO_USDC)).ok).toBe(true);
    expect(reads).toHaveLength(4);
    expect((await sign(PRICE_MICRO_USDC)).ok).toBe(true);
    expect(reads).toHaveLength(4);
    now += BALANCE_FRESH_MS;
    expect((await sign(PRICE_MICRO_USDC)).ok).toBe(true);
    expect(reads).toHaveLength(5);
  });
});
