// The receiving side of relay payments on solana-devnet, against the local cluster: a client's
// partially signed exact payment (v0 or legacy, with or without a Memo) checked for its shape,
// simulated, co-signed by our wallet as fee payer (the client holds no SOL) or settled by the
// facilitator, and refunded exactly.
import {
  getBase58Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
  type Address,
  type Instruction,
  type Signature,
} from '@solana/kit';
import { getTransferSolInstruction } from '@solana-program/system';
import { getTransferCheckedInstruction } from '@solana-program/token';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { Chains } from '../../payments/chains/index';
import { usdcAccountOf } from '../../payments/chains/solana';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { findRelayTransaction, recordClientPayment } from '../../payments/incoming/store';
import { refundClientPayment } from '../../payments/incoming/refund';
import { settleClientPayment } from '../../payments/incoming/settle';
import type { PaymentRequirements } from '../../payments/x402/types';
import { startPeers, type Peers, type SolanaPaymentOverrides } from '../../devnet/index';
import { generateSolanaKey } from '../../devnet/svm/keys';
import { memoInstruction } from '../../devnet/svm/payment-client';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { legacyTransfer } from '../support/httpayer-sdk';
import { createPeerChains, relayOffer, settlingOn, verifyXPayment, type Settling } from '../support/chains';
import { ifStarted } from '../support/teardown';

const NETWORK = 'solana-devnet' as const;
const USDC = NETWORK_TABLE[NETWORK].usdc as Address;
const PRICE_MICRO_USDC = 10_300n;

let peers: Peers;
let chains: Chains;
let database: TestDatabase;
let db: Db;
let direct: Settling;
let viaFacilitator: Settling;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK] });
  chains = await createPeerChains(peers, [NETWORK]);
  database = await createTestDatabase();
  db = database.handle.db;
  ({ direct, viaFacilitator } = settlingOn(chains, peers.facilitator.url));
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(chains)?.close();
  await ifStarted(peers)?.stop();
});

const service = () => peers.wallets.service.solana.address;
const client = () => peers.wallets.client.solana.address;

function offer(feePayer?: string): Promise<PaymentRequirements> {
  return relayOffer(chains, NETWORK, {
    amountMicroUsdc: PRICE_MICRO_USDC,
    resource: 'http://127.0.0.1/relay',
    ...(feePayer === undefined ? {} : { feePayer }),
  });
}

// litesvm's blockhash never changes, so two payments of one amount would be the same transaction
// (and rightly one payment): each test payment gets its own compute unit limit.
let paymentCount = 0;
function pay(requirements: PaymentRequirements, overrides?: SolanaPaymentOverrides) {
  paymentCount += 1;
  return peers.createSolanaPayment(requirements, {
    computeUnitLimit: 20_000 + paymentCount,
    ...overrides,
  });
}

async function balances() {
  return {
    client: await peers.usdcBalance(NETWORK, client()),
    service: await peers.usdcBalance(NETWORK, service()),
    clientLamports: await peers.nativeBalance(NETWORK, client()),
    serviceLamports: await peers.nativeBalance(NETWORK, service()),
  };
}

async function record(header: string, offered: PaymentRequirements[], deps = direct) {
  const verified = await verifyXPayment(header, offered, deps);
  if (!verified.ok) throw new Error(`refused: ${verified.reason}: ${verified.details}`);
  const row = await recordClientPayment(db, verified.value);
  if (!row.ok) throw new Error(row.reason);
  return row.value;
}

/** A legacy payment as HTTPayer's Python SDK builds it (solders' account order, limit 50,000, price 1). */
async function httpayerPayment(requirements: PaymentRequirements, signer = peers.wallets.client.solana.signer) {
  const transaction = await legacyTransfer({ signer, rpcUrl: peers.rpcUrls[NETWORK]! }, requirements);
  const payment = { x402Version: 1, scheme: 'exact', network: requirements.network, payload: { transaction } };
  return { transaction, header: Buffer.from(JSON.stringify(payment)).toString('base64') };
}

/** The landed transaction as the cluster keeps it, next to what the client sent. */
async function landedAs(signature: string, sentBase64: string) {
  const found = await chains.svm.networks
    .get(NETWORK)!
    .rpc.getTransaction(signature as Signature, {
      encoding: 'base64',
      maxSupportedTransactionVersion: 0,
      commitment: 'confirmed',
    })
    .send();
  if (!found) throw new Error(`${signature} has not landed`);
  const landed = getTransactionDecoder().decode(getBase64Encoder().encode(found.transaction[0]));
  const sent = getTransactionDecoder().decode(getBase64Encoder().encode(sentBase64));
  const base58 = getBase58Decoder();
  return {
    version: found.version,
    failed: found.meta?.err !== null,
    sameMessage: Buffer.from(landed.messageBytes).equals(Buffer.from(sent.messageBytes)),
    signers: Object.keys(landed.signatures),
    feePayerSignature: base58.decode(Object.values(landed.signatures)[0]!),
    payerSignatureKept: base58.decode(landed.signatures[client()]!) === base58.decode(sent.signatures[client()]!),
    messageVersion: getCompiledTransactionMessageDecoder().decode(landed.messageBytes).version,
  };
}

describe('a client paying us on solana-devnet', () => {
  it('verifies a payment with our wallet as fee payer: payer, exact amount, the payer signature as idempotency key', async () => {
    const requirements = await offer();
    expect(requirements).toMatchObject({
      network: NETWORK,
      payTo: service(),
      asset: USDC,
      extra: { feePayer: service() },
    });
    const { header, payment } = await pay(requirements);
    const result = await verifyXPayment(header, [requirements], direct);
    expect(result).toEqual({
      ok: true,
      value: {
        network: NETWORK,
        chainType: 'solana',
        payer: client(),
        payTo: service(),
        asset: USDC,
        amountMicroUsdc: PRICE_MICRO_USDC,
        idempotencyKey: {
          network: NETWORK,
          asset: USDC,
          nonceKey: expect.stringMatching(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/),
        },
        payment,
        requirements,
      },
    });
  });

  it('refuses a wrong destination, a wrong amount, the fee payer as authority and other shapes; nothing moves', async () => {
    const requirements = await offer();
    const before = await balances();
    const targetAccount = await usdcAccountOf(peers.wallets.target.solana.address, USDC);
    const serviceAccount = await usdcAccountOf(service(), USDC);
    const feePayerAsAuthority = (standard: Instruction[]) => [
      standard[0]!,
      standard[1]!,
      getTransferCheckedInstruction({
        source: serviceAccount,
        mint: USDC,
        destination: serviceAccount,
        authority: service(),
        amount: PRICE_MICRO_USDC,
        decimals: 6,
      }),
    ];
    const cases: Array<[string, SolanaPaymentOverrides]> = [
      ['wrong_recipient', { destination: targetAccount }],
      ['wrong_amount', { amount: PRICE_MICRO_USDC - 1n }],
      ['wrong_amount', { amount: PRICE_MICRO_USDC + 1n }],
      ['fee_payer_in_instruction', { instructions: feePayerAsAuthority }],
      ['wrong_fee_payer', { feePayer: peers.facilitator.solanaFeePayer as Address }],
      ['wrong_asset', { decimals: 9 }],
      ['compute_budget_too_high', { computeUnitPriceMicroLamports: 5_000_001n }],
      ['compute_budget_too_high', { computeUnitLimit: 1_400_000 }],
      ['invalid_transaction', { instructions: (standard) => [standard[2]!] }],
      ['invalid_transaction', { instructions: (standard) => [standard[1]!, standard[0]!, standard[2]!] }],
      ['network_not_offered', { network: 'solana' }],
      ['invalid_transaction', { memo: 'one', instructions: (standard) => [...standard, memoInstruction('two')] }],
      [
        'fee_payer_in_instruction',
        {
          version: 'legacy',
          instructions: (standard) => [...standard, memoInstruction('ours', { signers: [service()] })],
        },
      ],
      [
        'invalid_transaction',
        {
          memo: 'x',
          instructions: (standard) => [
            ...standard,
            getTransferSolInstruction({
              source: peers.wallets.client.solana.signer,
              destination: service(),
              amount: 1n,
            }),
          ],
        },
      ],
      ['invalid_transaction', { addressLookupTables: { [peers.wallets.target.solana.address]: [USDC] } }],
      ['wrong_amount', { version: 'legacy', memo: 'x', amount: PRICE_MICRO_USDC - 1n }],
      ['wrong_recipient', { version: 'legacy', destination: targetAccount }],
    ];
    for (const [reason, overrides] of cases) {
      const { header } = await pay(requirements, overrides);
      const result = await verifyXPayment(header, [requirements], direct);
      expect({ reason, result: result.ok ? 'accepted' : result.reason }).toEqual({ reason, result: reason });
    }
    expect(await balances()).toEqual(before);
  });

  it('refuses a payer who cannot pay, and a transaction whose payer signature was tampered with', async () => {
    const requirements = await offer();
    const stranger = await generateSolanaKey();
    await peers.createUsdcAccount(NETWORK, stranger.address);
    const poor = await peers.createSolanaPayment(requirements, undefined, stranger.secretKey);
    expect(await verifyXPayment(poor.header, [requirements], direct)).toMatchObject({
      ok: false,
      reason: 'insufficient_funds',
    });

    const { payment } = await pay(requirements);
    const wire = Buffer.from(payment.payload.transaction, 'base64');
    // The wire starts with the signature count (1 byte) and the fee payer's empty slot; flip a byte of the payer's signature.
    wire[1 + 64 + 10]! ^= 0xff;
    const tampered = { ...payment, payload: { transaction: wire.toString('base64') } };
    const header = Buffer.from(JSON.stringify(tampered)).toString('base64');
    expect(await verifyXPayment(header, [requirements], direct)).toMatchObject({
      ok: false,
      reason: 'invalid_signature',
    });
  });

  it('settles with our wallet as fee payer while the payer holds no SOL: exact balances, signature stored', async () => {
    const requirements = await offer();
    const { header } = await pay(requirements);
    const before = await balances();
    expect(before.clientLamports).toBe(0n);
    const row = await record(header, [requirements]);

    const outcome = await settleClientPayment(db, row.id, direct);
    expect(outcome).toEqual({ kind: 'settled', txHash: expect.stringMatching(/^[1-9A-HJ-NP-Za-km-z]{64,88}$/) });
    const after = await balances();
    expect(after.client).toBe(before.client - PRICE_MICRO_USDC);
    expect(after.service).toBe(before.service + PRICE_MICRO_USDC);
    expect(after.clientLamports).toBe(0n);
    expect(after.serviceLamports).toBeLessThan(before.serviceLamports);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({
      state: 'settled',
      settle_method: 'direct',
      client_tx_hash: outcome.kind === 'settled' && outcome.txHash,
    });
    const status = await chains.svm.signatureStatus(NETWORK, outcome.kind === 'settled' ? outcome.txHash : '');
    expect(status).toMatchObject({ ok: true, value: { kind: 'found', failed: false } });

    // The same X-PAYMENT again: refused by the database before anything, and by the cluster check too.
    expect(await verifyXPayment(header, [requirements], direct)).toMatchObject({
      ok: false,
      reason: 'nonce_already_used',
    });
    expect(await balances()).toEqual(after);
  });

  it("settles directly a legacy payment built as HTTPayer's SDK builds it, and a v0 one with x402's Memo: exact legs, the client's message with our signature first", async () => {
    const requirements = await offer();
    const httpayer = await httpayerPayment(requirements);
    const withMemo = await pay(requirements, { memo: '0123456789abcdef0123456789abcdef' });
    for (const [kind, header, transaction, version] of [
      ['legacy', httpayer.header, httpayer.transaction, 'legacy'],
      ['memo', withMemo.header, withMemo.payment.payload.transaction, 0],
    ] as const) {
      const before = await balances();
      const row = await record(header, [requirements]);
      const outcome = await settleClientPayment(db, row.id, direct);
      expect(outcome, kind).toEqual({ kind: 'settled', txHash: expect.any(String) });
      if (outcome.kind !== 'settled') return;
      const after = await balances();
      expect({ client: after.client, service: after.service, clientLamports: after.clientLamports }, kind).toEqual({
        client: before.client - PRICE_MICRO_USDC,
        service: before.service + PRICE_MICRO_USDC,
        clientLamports: 0n,
      });
      expect(after.serviceLamports).toBeLessThan(before.serviceLamports);
      expect(await landedAs(outcome.txHash, transaction), kind).toEqual({
        version,
        messageVersion: version,
        failed: false,
        sameMessage: true,
        signers: [service(), client()],
        feePayerSignature: outcome.txHash,
        payerSignatureKept: true,
      });
      expect(await findRelayTransaction(db, row.id)).toMatchObject({
        state: 'settled',
        settle_method: 'direct',
        client_tx_hash: outcome.txHash,
      });
    }
  });

  it("settles through the facilitator a legacy payment built as HTTPayer's SDK builds it, and a legacy one with a Memo; we pay no fee", async () => {
    const requirements = await offer(peers.facilitator.solanaFeePayer);
    const httpayer = await httpayerPayment(requirements);
    const withMemo = await pay(requirements, { version: 'legacy', memo: 'relay' });
    for (const [kind, header, transaction] of [
      ['legacy', httpayer.header, httpayer.transaction],
      ['legacy with memo', withMemo.header, withMemo.payment.payload.transaction],
    ] as const) {
      const before = await balances();
      const row = await record(header, [requirements], viaFacilitator);
      const outcome = await settleClientPayment(db, row.id, viaFacilitator);
      expect(outcome, kind).toEqual({ kind: 'settled', txHash: expect.any(String) });
      if (outcome.kind !== 'settled') return;
      expect(await balances(), kind).toEqual({
        ...before,
        client: before.client - PRICE_MICRO_USDC,
        service: before.service + PRICE_MICRO_USDC,
      });
      expect(await landedAs(outcome.txHash, transaction), kind).toMatchObject({
        version: 'legacy',
        failed: false,
        sameMessage: true,
        signers: [peers.facilitator.solanaFeePayer, client()],
        feePayerSignature: outcome.txHash,
      });
      expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settled', settle_method: 'facilitator' });
    }
  });

  it('refuses a replayed X-PAYMENT before any settlement, by the unique index', async () => {
    const requirements = await offer();
    const { header } = await pay(requirements);
    const before = await balances();
    await record(header, [requirements]);
    const verified = await verifyXPayment(header, [requirements], direct);
    expect(verified.ok).toBe(true);
    if (!verified.ok) return;
    expect(await recordClientPayment(db, verified.value)).toMatchObject({ ok: false, reason: 'nonce_already_used' });
    expect(await balances()).toEqual(before);
  });

  it('settles through the facilitator when its fee payer is the one offered; we pay no fee', async () => {
    const requirements = await offer(peers.facilitator.solanaFeePayer);
    const { header } = await pay(requirements);
    const before = await balances();
    const row = await record(header, [requirements], viaFacilitator);
    const outcome = await settleClientPayment(db, row.id, viaFacilitator);
    expect(outcome).toMatchObject({ kind: 'settled' });
    const after = await balances();
    expect(after.client).toBe(before.client - PRICE_MICRO_USDC);
    expect(after.service).toBe(before.service + PRICE_MICRO_USDC);
    expect(after.serviceLamports).toBe(before.serviceLamports);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'settled', settle_method: 'facilitator' });
  });

  it('does not settle directly a payment whose fee payer is not our wallet; nothing moves', async () => {
    const requirements = await offer(peers.facilitator.solanaFeePayer);
    const { header } = await pay(requirements);
    const before = await balances();
    const row = await record(header, [requirements], viaFacilitator);
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'failed', reason: 'invalid_offer' });
    expect(await findRelayTransaction(db, row.id)).toMatchObject({
      state: 'settle_failed',
      failure_reason: 'invalid_offer',
      client_tx_hash: null,
    });
    expect(await refundClientPayment(db, row.id, direct)).toMatchObject({ kind: 'failed', reason: 'not_refundable' });
    expect(await balances()).toEqual(before);
  });

  it('refunds a settled payment exactly, once; a second attempt returns the same signature and moves nothing', async () => {
    const requirements = await offer();
    const { header } = await pay(requirements);
    const before = await balances();
    const row = await record(header, [requirements]);
    expect(await settleClientPayment(db, row.id, direct)).toMatchObject({ kind: 'settled' });

    const refund = await refundClientPayment(db, row.id, direct);
    expect(refund).toMatchObject({ kind: 'refunded', network: NETWORK, method: 'direct', alreadyRequested: false });
    const afterRefund = await balances();
    expect(afterRefund.client).toBe(before.client);
    expect(afterRefund.service).toBe(before.service);
    expect(afterRefund.clientLamports).toBe(0n);
    expect(await findRelayTransaction(db, row.id)).toMatchObject({ state: 'refunded' });

    expect(await refundClientPayment(db, row.id, direct)).toEqual({ ...refund, alreadyRequested: true });
    expect(await balances()).toEqual(afterRefund);
  });
});
