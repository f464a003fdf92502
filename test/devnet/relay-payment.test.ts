// The receiving side of relay payments on EVM networks, against the local peers: a client's
// EIP-3009 authorization verified strictly against our 402, recorded once, settled directly (our
// wallet pays gas) or through the facilitator, and refunded exactly. Every refusal moves nothing.
import { createTestClient, getAddress, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { Chains } from '../../payments/chains/index';
import type { NetworkName } from '../../devnet/networks';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { findRelayTransaction, recordClientPayment } from '../../payments/incoming/store';
import { reconcileRefund, refundClientPayment } from '../../payments/incoming/refund';
import { reconcileSettlement, settleClientPayment } from '../../payments/incoming/settle';
import { DEFAULT_PAYMENT_BOUNDS, type VerifiedClientPayment } from '../../payments/incoming/types';
import { claimSettlement } from '../../payments/incoming/store';
import type { PaymentRequirements } from '../../payments/x402/types';
import { localTransport } from '../../devnet/evm/chain';
import { encodePaymentHeader, startPeers, type AuthorizationOverrides, type Peers } from '../../devnet/index';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { createPeerChains, relayOffer, settlingOn, verifyXPayment, type Settling } from '../support/chains';
import { ifStarted } from '../support/teardown';

const EVM_NETWORKS = ['base-sepolia', 'skale-base-sepolia'] as const;
const PRICE_MICRO_USDC = 10_300n;

let peers: Peers;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let direct: Settling;
let viaFacilitator: Settling;

beforeAll(async () => {
  peers = await startPeers({ networks: [...EVM_NETWORKS] });
  chains = await createPeerChains(peers, EVM_NETWORKS);
  database = await createTestDatabase();
  db = database.handle.db;
  ({ direct, viaFacilitator } = settlingOn(chains, peers.facilitator.url));
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(chains)?.close();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.evm.address;
const client = () => peers.wallets.client.evm.address;
const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000));

function offer(network: NetworkName, amountMicroUsdc = PRICE_MICRO_USDC): Promise<PaymentRequirements> {
  return relayOffer(chains, network, { amountMicroUsdc, resource: 'http://127.0.0.1/relay' });
}

function sign(requirements: PaymentRequirements, overrides?: AuthorizationOverrides, privateKey?: Hex) {
  return peers.signEvmPayment(requirements, overrides, privateKey);
}

async function balances(network: NetworkName) {
  return {
    client: await peers.usdcBalance(network, client()),
    service: await peers.usdcBalance(network, service()),
    serviceWei: await peers.nativeBalance(network, service()),
    clientWei: await peers.nativeBalance(network, client()),
  };
}

async function verified(
  network: NetworkName,
  header: string,
  offered?: PaymentRequirements[],
): Promise<VerifiedClientPayment> {
  const result = await verifyXPayment(header, offered ?? [await offer(network)], direct);
  if (!result.ok) throw new Error(`refused: ${result.reason}: ${result.details}`);
  return result.value;
}

async function recorded(network: NetworkName, header: string) {
  const result = await recordClientPayment(db, await verified(network, header), {
    targetUrl: 'http://127.0.0.1/paid',
    targetMethod: 'GET',
  });
  if (!result.ok) throw new Error(result.reason);
  return result.value;
}

describe.each(EVM_NETWORKS)('a client paying us on %s', (network) => {
  const other: NetworkName = network === 'base-sepolia' ? 'skale-base-sepolia' : 'base-sepolia';

  it('verifies: payer, network, exact amount, our payTo and USDC, the nonce as idempotency key', async () => {
    const requirements = await offer(network);
    expect(requirements).toMatchObject({
      scheme: 'exact',
      network,
      payTo: service(),
      asset: getAddress(NETWORK_TABLE[network].usdc),
      maxAmountRequired: '10300',
    });
    const { header, payment } = await sign(requirements);
    const result = await verifyXPayment(header, [await offer(other), requirements], direct);
    expect(result).toEqual({
      ok: true,
      value: {
        network,
        chainType: 'evm',
        payer: client(),
        payTo: service(),
        asset: getAddress(NETWORK_TABLE[network].usdc),
        amountMicroUsdc: PRICE_MICRO_USDC,
        idempotencyKey: {
          network,
          asset: getAddress(NETWORK_TABLE[network].usdc),
          nonceKey: payment.payload.authorization.nonce.toLowerCase(),
        },
        payment,
        requirements,
        validBefore: BigInt(payment.payload.authorization.validBefore),
      },
    });
  });

  it('refuses every mismatch with its own reason, and nothing moves', async () => {
    const requirements = await offer(network);
    const before = await balances(network);
    const stranger = generatePrivateKey();
    const now = nowSeconds();
    const tampered = await sign(requirements, { value: PRICE_MICRO_USDC - 1n });
    tampered.payment.payload.authorization.value = PRICE_MICRO_USDC.toString();
    const elsewhere = { ...requirements, payTo: peers.wallets.target.evm.address };
    const forged = await sign(requirements, {}, stranger);
    forged.payment.payload.authorization.from = client();
    // r = 0 and r = the group order are no signature at all (no point has them); s = 0 likewise.
    const ORDER = 'fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141';
    const outOfRange = await Promise.all(
      [
        (signature: string): Hex => `0x${'00'.repeat(32)}${signature.slice(66)}`,
        (signature: string): Hex => `0x${ORDER}${signature.slice(66)}`,
        (signature: string): Hex => `0x${signature.slice(2, 66)}${'00'.repeat(32)}${signature.slice(130)}`,
      ].map(async (replace) => {
        const signed = await sign(requirements);
        signed.payment.payload.signature = replace(signed.payment.payload.signature);
        return encodePaymentHeader(signed.payment);
      }),
    );

    const cases: Array<[string, string, PaymentRequirements[]]> = [
      ['wrong_recipient', (await sign(requirements, { to: peers.wallets.target.evm.address })).header, [requirements]],
      ['wrong_amount', (await sign(requirements, { value: PRICE_MICRO_USDC - 1n })).header, [requirements]],
      ['wrong_amount', (await sign(requirements, { value: PRICE_MICRO_USDC + 1n })).header, [requirements]],
      ['network_not_offered', (await sign(await offer(other))).header, [requirements]],
      ['network_not_offered', (await sign(requirements, { network: other })).header, [requirements]],
      ['expired', (await sign(requirements, { validBefore: now - 1n })).header, [requirements]],
      ['expired', (await sign(requirements, { validBefore: now + 10n })).header, [requirements]],
      ['not_yet_valid', (await sign(requirements, { validAfter: now + 60n })).header, [requirements]],
      ['invalid_signature', (await sign(requirements, { domain: { chainId: 1 } })).header, [requirements]],
      ['invalid_signature', (await sign(requirements, { domain: { name: 'USD Coin' } })).header, [requirements]],
      ['invalid_signature', encodePaymentHeader(forged.payment), [requirements]],
      ['invalid_signature', encodePaymentHeader(tampered.payment), [requirements]],
      ...outOfRange.map((header): [string, string, PaymentRequirements[]] => [
        'invalid_signature',
        header,
        [requirements],
      ]),
      ['insufficient_funds', (await sign(requirements, {}, stranger)).header, [requirements]],
      // An offer that would pay someone else is ours to get right; it is refused, not trusted.
      ['invalid_offer', (await sign(elsewhere)).header, [elsewhere]],
      ['invalid_header', 'not base64 at all!', [requirements]],
      ['invalid_header', Buffer.from('{"x402Version":1').toString('base64'), [requirements]],
      [
        'invalid_scheme',
        Buffer.from(JSON.stringify({ ...tampered.payment, scheme: 'upto' })).toString('base64'),
        [requirements],
      ],
      [
        'unsupported_version',
        Buffer.from(JSON.stringify({ ...tampered.payment, x402Version: 2 })).toString('base64'),
        [requirements],
      ],
    ];
    for (const [reason, header, offered] of cases) {
      const result = await verifyXPayment(header, offered, direct);
      expect({ reason, result: result.ok ? 'accepted' : result.reason }).toEqual({ reason, result: reason });
    }
    expect(await balances(network)).toEqual(before);
  });

  it('refuses a nonce already used on chain', async () => {
    const requirements = await offer(network);
    const { header, payment } = await sign(requirements);
    // Someone settles it first (here the facilitator, asked directly).
    const settled = await fetch(`${peers.facilitator.url}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ x402Version: 1, paymentPayload: payment, paymentRequirements: requirements }),
    }).then((response) => response.json());
    expect(settled).toMatchObject({ success: true });
    const before = await balances(network);
    expect(await verifyXPayment(header, [requirements], direct)).toMatchObject({
      ok: false,
      reason: 'nonce_already_used',
    });
    expect(await balances(network)).toEqual(before);
  });

  it('settles directly: exact balances, gas from our wallet, hash stored, settled once', async () => {
    const requirements = await offer(network);
    const { header, payment } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);

    const outcome = await settleClientPayment(db, row.id, direct);
    expect(outcome).toEqual({ kind: 'settled', txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    if (outcome.kind !== 'settled') return;
    const after = await balances(network);
    expect(after.client).toBe(before.client - PRICE_MICRO_USDC);
    expect(after.service).toBe(before.service + PRICE_MICRO_USDC);
    expect(after.clientWei).toBe(0n);
    expect(after.serviceWei).toBeLessThan(before.serviceWei);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({
      state: 'settled',
      settle_method: 'direct',
      client_tx_hash: outcome.txHash,
    });
    const use = await chains.evm.findAuthorizationUse(network, client(), payment.payload.authorization.nonce);
    expect(use).toMatchObject({ ok: true, value: { state: 'settled', transactionHash: outcome.txHash } });

    // A second call settles nothing more and answers the stored outcome; the payment is now spent on chain.
    expect(await settleClientPayment(db, row.id, direct)).toEqual(outcome);
    expect(await verifyXPayment(header, [requirements], direct)).toMatchObject({
      ok: false,
      reason: 'nonce_already_used',
    });
    expect(await balances(network)).toEqual(after);
  });

  it('settles through the facilitator: exact balances, no gas from us, the facilitator called once', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);
    const calls = peers.facilitator.calls.length;

    const outcome = await settleClientPayment(db, row.id, viaFacilitator);
    expect(outcome).toEqual({ kind: 'settled', txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
    const after = await balances(network);
    expect(after.client).toBe(before.client - PRICE_MICRO_USDC);
    expect(after.service).toBe(before.service + PRICE_MICRO_USDC);
    expect(after.serviceWei).toBe(before.serviceWei);
    const settleCalls = peers.facilitator.calls.slice(calls).filter((call) => call.path === '/settle');
    expect(settleCalls).toHaveLength(1);
    expect(settleCalls[0]!.answer).toMatchObject({
      success: true,
      transaction: outcome.kind === 'settled' ? outcome.txHash : '',
    });
    expect(await findRelayTransaction(db, row.id)).toMatchObject({
      state: 'settled',
      settle_method: 'facilitator',
      client_tx_hash: outcome.kind === 'settled' && outcome.txHash,
    });
  });

  it('refuses a replayed X-PAYMENT before any settlement, by the unique index', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const first = await recorded(network, header);
    // Not settled yet: the chain still accepts the nonce, our database does not.
    const again = await recordClientPayment(db, await verified(network, header));
    expect(again).toMatchObject({ ok: false, reason: 'nonce_already_used' });
    expect(await balances(network)).toEqual(before);

    expect(await settleClientPayment(db, first.id, direct)).toMatchObject({ kind: 'settled' });
    expect((await balances(network)).client).toBe(before.client - PRICE_MICRO_USDC);
  });

  it('records exactly one of two identical X-PAYMENTs arriving at the same moment', async () => {
    const requirements = await offer(network);
    const { header, payment } = await sign(requirements);
    const attempt = async () => {
      const result = await verifyXPayment(header, [requirements], direct);
      if (!result.ok) return result.reason;
      const row = await recordClientPayment(db, result.value);
      return row.ok ? 'recorded' : row.reason;
    };
    const results = await Promise.all([attempt(), attempt()]);
    expect(results.sort()).toEqual(['nonce_already_used', 'recorded']);
    const rows = await db
      .selectFrom('relay_transactions')
      .select('id')
      .where('nonce_key', '=', payment.payload.authorization.nonce.toLowerCase())
      .execute();
    expect(rows).toHaveLength(1);
  });

  it('answers pending with the hash when the receipt wait runs out, and reconciles it to settled', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);
    const impatient: Settling = {
      ...direct,
      paymentBounds: { ...DEFAULT_PAYMENT_BOUNDS, confirmationTimeoutMs: 1, confirmationPollMs: 1_000 },
    };

    // The chain holds the settlement in its mempool, so its receipt cannot arrive within the wait.
    const txHash = await withMempoolHeld(network, async () => {
      const outcome = await settleClientPayment(db, row.id, impatient);
      expect(outcome).toEqual({ kind: 'pending', txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/) });
      const hash = 'txHash' in outcome ? outcome.txHash : undefined;
      expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settling', client_tx_hash: hash });
      return hash;
    });

    const reconciled = await reconcileSettlement(db, row.id, direct);
    expect(reconciled).toEqual({ kind: 'settled', txHash });
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settled' });
    expect((await balances(network)).client).toBe(before.client - PRICE_MICRO_USDC);
  });

  it('reconciles a row left in settling without a transaction: settled by someone else, or expired unused', async () => {
    // Crash after the claim: nothing of ours was sent, the facilitator settled it meanwhile.
    const requirements = await offer(network);
    const first = await sign(requirements);
    const row = await recorded(network, first.header);
    await claimSettlement(db, row.id, 'direct');
    const settledElsewhere = await fetch(`${peers.facilitator.url}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ x402Version: 1, paymentPayload: first.payment, paymentRequirements: requirements }),
    }).then((response) => response.json() as Promise<{ transaction: string }>);
    expect(await reconcileSettlement(db, row.id, direct)).toEqual({
      kind: 'settled',
      txHash: settledElsewhere.transaction,
    });

    // An authorization that expired unused can never move money: settle_failed.
    const now = nowSeconds();
    const stale = await sign(requirements, { validAfter: now - 3_600n, validBefore: now - 1_800n });
    const accepted = await verified(network, (await sign(requirements)).header);
    const staleVerified: VerifiedClientPayment = {
      ...accepted,
      payment: stale.payment as VerifiedClientPayment['payment'],
      idempotencyKey: { ...accepted.idempotencyKey, nonceKey: stale.payment.payload.authorization.nonce.toLowerCase() },
      validBefore: now - 1_800n,
    };
    const staleRow = await recordClientPayment(db, staleVerified);
    if (!staleRow.ok) throw new Error('not recorded');
    await claimSettlement(db, staleRow.value.id, 'direct');
    expect(await reconcileSettlement(db, staleRow.value.id, direct)).toMatchObject({
      kind: 'failed',
      reason: 'expired',
    });
    expect(await findRelayTransaction(db, staleRow.value.id)).toMatchObject({
      state: 'settle_failed',
      failure_reason: 'expired',
    });
  });

  it('refunds a settled payment exactly (we pay gas), once; a second attempt returns the same hash and moves nothing', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });
    expect(await refundClientPayment(db, row.id + 1_000_000n, direct)).toMatchObject({
      kind: 'failed',
      reason: 'not_found',
    });

    const refund = await refundClientPayment(db, row.id, direct);
    expect(refund).toEqual({
      kind: 'refunded',
      refundId: expect.any(BigInt),
      txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      network,
      method: 'direct',
      alreadyRequested: false,
    });
    const afterRefund = await balances(network);
    expect(afterRefund.client).toBe(before.client);
    expect(afterRefund.service).toBe(before.service);
    expect(afterRefund.clientWei).toBe(0n);
    expect(afterRefund.serviceWei).toBeLessThan(before.serviceWei);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'refunded' });

    const again = await refundClientPayment(db, row.id, direct);
    expect(again).toEqual({ ...refund, alreadyRequested: true });
    expect(await balances(network)).toEqual(afterRefund);
    const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', row.id).execute();
    expect(refunds).toMatchObject([
      {
        status: 'confirmed',
        method: 'direct',
        recipient: client(),
        amount_micro: PRICE_MICRO_USDC,
        tx_hash: refund.kind === 'refunded' && refund.txHash,
      },
    ]);
  });

  it('sends one refund when two attempts start at once', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });
    const [first, second] = await Promise.all([
      refundClientPayment(db, row.id, direct),
      refundClientPayment(db, row.id, direct),
    ]);
    expect(
      [first, second].filter((outcome) => 'alreadyRequested' in outcome && !outcome.alreadyRequested),
    ).toHaveLength(1);
    expect((await balances(network)).client).toBe(before.client);
    const refunds = await db
      .selectFrom('refunds')
      .select(['status'])
      .where('relay_transaction_id', '=', row.id)
      .execute();
    expect(refunds).toEqual([{ status: 'confirmed' }]);
  });

  it('answers a refund pending with its hash when the receipt wait runs out, and reconciles it to confirmed', async () => {
    const requirements = await offer(network);
    const { header } = await sign(requirements);
    const before = await balances(network);
    const row = await recorded(network, header);
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });
    const impatient: Settling = {
      ...direct,
      paymentBounds: { ...DEFAULT_PAYMENT_BOUNDS, confirmationTimeoutMs: 1, confirmationPollMs: 1_000 },
    };
    // The chain holds the refund in its mempool, so its receipt cannot arrive within the wait.
    const refund = await withMempoolHeld(network, async () => {
      const pending = await refundClientPayment(db, row.id, impatient);
      expect(pending).toMatchObject({
        kind: 'pending',
        txHash: expect.stringMatching(/^0x[0-9a-f]{64}$/),
        alreadyRequested: false,
      });
      // While pending, another attempt sends nothing and answers the same transaction.
      expect(await refundClientPayment(db, row.id, impatient)).toEqual({ ...pending, alreadyRequested: true });
      return pending;
    });
    if (refund.kind !== 'pending') throw new Error('the refund was not pending');
    expect(await reconcileRefund(db, refund.refundId, direct)).toMatchObject({
      kind: 'refunded',
      txHash: refund.txHash,
      refundId: refund.refundId,
    });
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'refunded' });
    expect((await balances(network)).client).toBe(before.client);
  });

  it('refunds nothing for a payment that never settled', async () => {
    const requirements = await offer(network);
    const row = await recorded(network, (await sign(requirements)).header);
    const before = await balances(network);
    expect(await refundClientPayment(db, row.id, direct)).toMatchObject({ kind: 'failed', reason: 'not_refundable' });
    expect(await balances(network)).toEqual(before);
    expect(await db.selectFrom('refunds').select('id').where('relay_transaction_id', '=', row.id).execute()).toEqual(
      [],
    );
  });
});

/** Runs `work` while the local chain keeps new transactions in its mempool, then mines them. */
async function withMempoolHeld<T>(network: NetworkName, work: () => Promise<T>): Promise<T> {
  const chain = peers.evmChains[network as keyof typeof peers.evmChains]!;
  const miner = createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  await miner.setAutomine(false);
  try {
    return await work();
  } finally {
    await miner.setAutomine(true);
    await miner.mine({ blocks: 1 });
  }
}

describe('our wallet address and asset', () => {
  it('are what the offer names on every network', async () => {
    for (const network of EVM_NETWORKS) {
      const requirements = await offer(network);
      expect(requirements.payTo as Address).toBe(service());
      expect(requirements.extra).toEqual(NETWORK_TABLE[network].eip712);
    }
    expect(privateKeyToAccount(peers.wallets.service.evm.privateKey).address).toBe(service());
  });
});
