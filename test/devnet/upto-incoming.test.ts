// A client paying us by `upto` on the local Polygon Amoy (USDC, 6 decimals) and MegaETH (MegaUSD,
// 18 decimals, Permit2 only): unmodified @x402/core's client with @x402/evm 2.27's upto client
// scheme signs a Permit2 permit for the maximum of our offer; we verify it as @x402/evm's upto
// facilitator does, with us as the facilitator, and settle through x402UptoPermit2Proxy only the
// amount we choose. The chain shows exactly that amount moved from the client to our wallet; every
// refusal, at verification or at settlement, moves nothing and sends nothing.
import { getAddress, parseAbi, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS } from '../../devnet/evm/permit2';
import {
  atomicAmount,
  CAIP2_NETWORKS,
  EVM_NETWORKS,
  startPeers,
  type EvmNetworkName,
  type Peers,
} from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import type { Chains } from '../../payments/chains/index';
import { checkUptoPaymentSignature, type UptoPaymentSignature } from '../../payments/chains/evm/uptoIncoming/payload';
import { uptoOffer } from '../../payments/chains/evm/uptoIncoming/offer';
import { settleUptoPayment, readUptoSettlement } from '../../payments/chains/evm/uptoIncoming/settle';
import { verifyUptoPayment, type VerifiedUptoPayment } from '../../payments/chains/evm/uptoIncoming/verify';
import type { PaymentRequirementsV2 } from '../../payments/x402/v2';
import { createPeerChains, settlingOn, type Settling } from '../support/chains';
import { ifStarted } from '../support/teardown';
import { approvePermit2AsOwner } from '../support/upto';

const NETWORKS: EvmNetworkName[] = ['polygon-amoy', 'megaeth'];
const MAXIMUM_MICRO_USDC = 50_000n;
const TIMEOUT_SECONDS = 300;
const erc20 = parseAbi([
  'function approve(address spender, uint256 amount) returns (bool)',
  'function transfer(address to, uint256 amount) returns (bool)',
]);

let peers: Peers;
let chains: Chains;
let deps: Settling;

/** Stores nothing: these tests follow no record; the production caller stores the transaction on its row. */
const store = () => Promise.resolve(true);

beforeAll(async () => {
  peers = await startPeers({ networks: NETWORKS });
  chains = await createPeerChains(peers, NETWORKS);
  ({ direct: deps } = settlingOn(chains, peers.facilitator.url));
  // The client's one approval of Permit2 on each token, as its owner would give it (with gas of its own).
  for (const network of NETWORKS) await approvePermit2(network, peers.wallets.client.evm.privateKey);
});

afterAll(async () => {
  await ifStarted(chains)?.close();
  await ifStarted(peers)?.stop();
});

const us = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;
const chain = (network: EvmNetworkName) => peers.evmChains[network]!;
const token = (network: EvmNetworkName) => getAddress(EVM_NETWORKS[network].usdc);

const approvePermit2 = (network: EvmNetworkName, privateKey: Hex) => approvePermit2AsOwner(peers, network, privateKey);

function offerOn(network: EvmNetworkName, options: { maxTimeoutSeconds?: number } = {}): PaymentRequirementsV2 {
  const offer = uptoOffer(deps, network, {
    maximumMicroUsdc: MAXIMUM_MICRO_USDC,
    maxTimeoutSeconds: options.maxTimeoutSeconds ?? TIMEOUT_SECONDS,
  });
  if (!offer.ok) throw new Error(`${offer.reason}: ${offer.details}`);
  return offer.value;
}

/**
 * The PAYMENT-SIGNATURE the unmodified client makes for `offer` (its JSON, as our header decoding
 * would read it), signed by `privateKey` (the client's by default), checked as untrusted input.
 */
async function pay(offer: PaymentRequirementsV2, privateKey = peers.wallets.client.evm.privateKey) {
  const payment = await x402ClientV2(privateKeyToAccount(privateKey), { upto: true }).createPaymentPayload({
    x402Version: 2,
    resource: { url: 'http://127.0.0.1/relay' },
    accepts: [offer],
  });
  expect(payment.accepted.scheme).toBe('upto');
  const checked = checkUptoPaymentSignature(JSON.parse(JSON.stringify(payment)));
  if (!checked.ok) throw new Error(`${checked.reason}: ${checked.details}`);
  return checked.value;
}

async function verified(payment: UptoPaymentSignature, offer: PaymentRequirementsV2): Promise<VerifiedUptoPayment> {
  const result = await verifyUptoPayment(deps, payment, offer);
  if (!result.ok) throw new Error(`${result.reason}: ${result.details}`);
  return result.value;
}

/** The token held by the client and by us, and how many transactions our wallet has sent. */
async function ledger(network: EvmNetworkName, payer: Address = client()) {
  return {
    payer: await peers.usdcBalance(network, payer),
    us: await peers.usdcBalance(network, us()),
    ourTransactions: await chain(network).publicClient.getTransactionCount({ address: us() }),
  };
}

describe.each(NETWORKS)('a client paying us by upto on %s', (network) => {
  const maximum = () => atomicAmount(network, MAXIMUM_MICRO_USDC);

  it('is offered upto for the maximum, payTo and facilitator our wallet, extra as @x402/evm’s upto server writes it', () => {
    expect(offerOn(network)).toEqual({
      scheme: 'upto',
      network: CAIP2_NETWORKS[network],
      amount: maximum().toString(),
      asset: token(network),
      payTo: us(),
      maxTimeoutSeconds: TIMEOUT_SECONDS,
      extra: {
        ...EVM_NETWORKS[network].eip712,
        assetTransferMethod: 'permit2',
        facilitatorAddress: us(),
      },
    });
  });

  it('is verified, and we settle 60% of the maximum: exactly that moves from the client to us', async () => {
    const offer = offerOn(network);
    const payment = await pay(offer);
    const payment2Nonce = BigInt(payment.payload.permit2Authorization.nonce);
    const result = await verified(payment, offer);
    expect(result).toMatchObject({
      scheme: 'upto',
      network,
      payer: client(),
      payTo: us(),
      asset: token(network),
      maximum: maximum(),
      amountMicroUsdc: MAXIMUM_MICRO_USDC,
      idempotencyKey: {
        network,
        asset: token(network),
        nonceKey: `permit2:${client().toLowerCase()}:0x${payment2Nonce.toString(16).padStart(64, '0')}`,
      },
    });
    const before = await ledger(network);
    const used = (maximum() * 6n) / 10n;

    const settled = await settleUptoPayment(deps, result, used, store);

    expect(settled).toMatchObject({ ok: true, value: { state: 'settled', amount: used } });
    if (!settled.ok || settled.value.state !== 'settled') return;
    const receipt = await chain(network).publicClient.getTransactionReceipt({ hash: settled.value.txHash });
    expect(getAddress(receipt.to!)).toBe(UPTO_PERMIT2_PROXY_ADDRESS);
    expect(getAddress(receipt.from)).toBe(us());
    expect(await ledger(network)).toEqual({
      payer: before.payer - used,
      us: before.us + used,
      ourTransactions: before.ourTransactions + 1,
    });
    // Read again later (a job following it), the chain says the same.
    expect(await readUptoSettlement(deps, result, settled.value.txHash, used)).toMatchObject({
      ok: true,
      value: { state: 'settled', amount: used, txHash: settled.value.txHash },
    });

    // The same permit a second time: verification refuses it, and so does settlement; nothing moves.
    const after = await ledger(network);
    expect(await verifyUptoPayment(deps, payment, offer)).toMatchObject({ ok: false, reason: 'nonce_already_used' });
    expect(await settleUptoPayment(deps, result, used, store)).toMatchObject({
      ok: false,
      reason: 'nonce_already_used',
    });
    expect(await ledger(network)).toEqual(after);
  });

  it('settles the maximum in full', async () => {
    const offer = offerOn(network);
    const result = await verified(await pay(offer), offer);
    const before = await ledger(network);

    const settled = await settleUptoPayment(deps, result, maximum(), store);

    expect(settled).toMatchObject({ ok: true, value: { state: 'settled', amount: maximum() } });
    expect(await ledger(network)).toEqual({
      payer: before.payer - maximum(),
      us: before.us + maximum(),
      ourTransactions: before.ourTransactions + 1,
    });
  });

  it('settles nothing above the signed maximum, and sends nothing for 0 (the permit stays unused)', async () => {
    const offer = offerOn(network);
    const payment = await pay(offer);
    const result = await verified(payment, offer);
    const before = await ledger(network);

    expect(await settleUptoPayment(deps, result, maximum() + 1n, store)).toMatchObject({
      ok: false,
      reason: 'invalid_amount',
    });
    expect(await settleUptoPayment(deps, result, -1n, store)).toMatchObject({ ok: false, reason: 'invalid_amount' });
    expect(await settleUptoPayment(deps, result, 0n, store)).toEqual({
      ok: true,
      value: { state: 'nothing_to_settle', amount: 0n },
    });
    expect(await ledger(network)).toEqual(before);
    // Still unused: it verifies as before.
    expect((await verifyUptoPayment(deps, payment, offer)).ok).toBe(true);
  });

  describe('refuses, moving nothing', () => {
    it('a permit signed by another key than the payer it names', async () => {
      const offer = offerOn(network);
      const other = generatePrivateKey();
      const payment = await pay(offer, other);
      const forged: UptoPaymentSignature = {
        ...payment,
        payload: {
          ...payment.payload,
          permit2Authorization: { ...payment.payload.permit2Authorization, from: client() },
        },
      };
      expect(await verifyUptoPayment(deps, forged, offer)).toMatchObject({ ok: false, reason: 'invalid_signature' });
    });

    it('a permit whose witness pays someone else, or lets someone else settle it', async () => {
      const offer = offerOn(network);
      const elsewhere = privateKeyToAccount(generatePrivateKey()).address;
      // Signed for another recipient, sent as a payment of our offer.
      const toOther = await pay({ ...offer, payTo: elsewhere });
      expect(await verifyUptoPayment(deps, { ...toOther, accepted: offer }, offer)).toMatchObject({
        ok: false,
        reason: 'wrong_recipient',
      });
      // As sent: it accepted another offer than ours.
      expect(await verifyUptoPayment(deps, toOther, offer)).toMatchObject({ ok: false, reason: 'offer_mismatch' });
      const otherFacilitator = await pay({ ...offer, extra: { ...offer.extra, facilitatorAddress: elsewhere } });
      expect(await verifyUptoPayment(deps, { ...otherFacilitator, accepted: offer }, offer)).toMatchObject({
        ok: false,
        reason: 'wrong_facilitator',
      });
    });

    it('a permit naming another spender or token, or valid only later', async () => {
      const offer = offerOn(network);
      const payment = await pay(offer);
      const changed = (change: Partial<UptoPaymentSignature['payload']['permit2Authorization']>) => ({
        ...payment,
        payload: { ...payment.payload, permit2Authorization: { ...payment.payload.permit2Authorization, ...change } },
      });
      const { permitted, witness } = payment.payload.permit2Authorization;
      expect(await verifyUptoPayment(deps, changed({ spender: PERMIT2_ADDRESS }), offer)).toMatchObject({
        ok: false,
        reason: 'wrong_spender',
      });
      expect(await verifyUptoPayment(deps, changed({ permitted: { ...permitted, token: us() } }), offer)).toMatchObject(
        { ok: false, reason: 'wrong_asset' },
      );
      const tomorrow = String(Math.floor(Date.now() / 1000) + 86_400);
      expect(
        await verifyUptoPayment(deps, changed({ witness: { ...witness, validAfter: tomorrow } }), offer),
      ).toMatchObject({ ok: false, reason: 'not_yet_valid' });
    });

    it('a permit for another maximum than ours', async () => {
      const offer = offerOn(network);
      const larger = await pay({ ...offer, amount: (maximum() * 2n).toString() });
      expect(await verifyUptoPayment(deps, { ...larger, accepted: offer }, offer)).toMatchObject({
        ok: false,
        reason: 'wrong_amount',
      });
    });

    it('a permit past its deadline, or too close to it to settle', async () => {
      const offer = offerOn(network);
      const payment = await pay(offer);
      const later = { ...deps, clock: { now: () => new Date(Date.now() + 3_600_000) } };
      expect(await verifyUptoPayment(later, payment, offer)).toMatchObject({ ok: false, reason: 'expired' });
      const short = offerOn(network, { maxTimeoutSeconds: 10 });
      expect(await verifyUptoPayment(deps, await pay(short), short)).toMatchObject({ ok: false, reason: 'expired' });
    });

    it('a payer who has not approved Permit2, or holds less than the maximum', async () => {
      const offer = offerOn(network);
      const unapproved = generatePrivateKey();
      await peers.mint(network, privateKeyToAccount(unapproved).address, MAXIMUM_MICRO_USDC * 2n);
      expect(await verifyUptoPayment(deps, await pay(offer, unapproved), offer)).toMatchObject({
        ok: false,
        reason: 'permit2_allowance_missing',
      });

      const poor = generatePrivateKey();
      await approvePermit2(network, poor);
      await peers.mint(network, privateKeyToAccount(poor).address, MAXIMUM_MICRO_USDC / 2n);
      const before = await ledger(network, privateKeyToAccount(poor).address);
      expect(await verifyUptoPayment(deps, await pay(offer, poor), offer)).toMatchObject({
        ok: false,
        reason: 'insufficient_funds',
      });
      expect(await ledger(network, privateKeyToAccount(poor).address)).toEqual(before);
    });

    it('at settlement: funds moved away since verification, or a deadline that passed meanwhile', async () => {
      const offer = offerOn(network);
      const payer = generatePrivateKey();
      const payerAddress = privateKeyToAccount(payer).address;
      await approvePermit2(network, payer);
      await peers.mint(network, payerAddress, MAXIMUM_MICRO_USDC);
      const result = await verified(await pay(offer, payer), offer);

      const later = { ...deps, clock: { now: () => new Date(Date.now() + 3_600_000) } };
      const before = await ledger(network, payerAddress);
      expect(await settleUptoPayment(later, result, maximum(), store)).toMatchObject({ ok: false, reason: 'expired' });
      expect(await ledger(network, payerAddress)).toEqual(before);

      // The payer spends most of it elsewhere between our verification and our settlement.
      const away = await peers.evmWalletClient(network, payer).writeContract({
        address: token(network),
        abi: erc20,
        functionName: 'transfer',
        args: [peers.wallets.target.evm.address, (maximum() * 3n) / 4n],
        chain: chain(network).chain,
        account: privateKeyToAccount(payer),
      });
      await chain(network).publicClient.waitForTransactionReceipt({ hash: away });
      const moved = await ledger(network, payerAddress);
      expect(await settleUptoPayment(deps, result, maximum(), store)).toMatchObject({
        ok: false,
        reason: 'insufficient_funds',
      });
      expect(await ledger(network, payerAddress)).toEqual(moved);
      // What is left can still be settled.
      const rest = maximum() / 4n;
      expect(await settleUptoPayment(deps, result, rest, store)).toMatchObject({
        ok: true,
        value: { state: 'settled', amount: rest },
      });
      expect(await ledger(network, payerAddress)).toEqual({
        payer: moved.payer - rest,
        us: moved.us + rest,
        ourTransactions: moved.ourTransactions + 1,
      });
    });
  });
});
