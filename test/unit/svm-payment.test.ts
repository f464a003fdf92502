// The exact-scheme Solana payment we send to targets, against a litesvm ledger behind the harness's
// JSON-RPC endpoint: our payer holds USDC and no SOL; a separate key stands in for the target's
// facilitator (fee payer), co-signs and sends. Balances move by exactly the amount.
import {
  decompileTransactionMessage,
  getBase58Decoder,
  getBase64EncodedWireTransaction,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  partiallySignTransaction,
  type Address,
  type Instruction,
} from '@solana/kit';
import {
  COMPUTE_BUDGET_PROGRAM_ADDRESS,
  parseSetComputeUnitLimitInstruction,
  parseSetComputeUnitPriceInstruction,
} from '@solana-program/compute-budget';
import { TOKEN_PROGRAM_ADDRESS, parseTransferCheckedInstruction } from '@solana-program/token';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../payments/config';
import {
  COMPUTE_UNIT_LIMIT_RANGE,
  COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE,
  createSvmChains,
  solanaSecretKeyBytes,
  usdcAccountOf,
  type SvmChains,
} from '../../payments/networks/svm';
import { NETWORK_TABLE } from '../../payments/networks/table';
import type { PaymentRequirements } from '../../payments/x402/types';
import { createSvmFacilitator } from '../../devnet/facilitator/svm';
import type { PaymentRequirements as HarnessRequirements } from '../../devnet/x402';
import { KeyedQueue } from '../../devnet/key-queue';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import { SolanaLedger } from '../../devnet/svm/ledger';
import { startSolanaRpcServer, type SolanaRpcServer } from '../../devnet/svm/rpc-server';

const NETWORK = 'solana-devnet' as const;
const MINT = NETWORK_TABLE[NETWORK].usdc as Address;
const FUNDED_MICRO_USDC = 5_000_000n;

let ledger: SolanaLedger;
let server: SolanaRpcServer;
let chains: SvmChains;
let payer: SolanaKey;
let feePayer: SolanaKey;
let payTo: SolanaKey;

beforeAll(async () => {
  const mintAuthority = await generateSolanaKey();
  [payer, feePayer, payTo] = await Promise.all([generateSolanaKey(), generateSolanaKey(), generateSolanaKey()]);
  ledger = new SolanaLedger(NETWORK, mintAuthority.signer);
  ledger.airdrop(feePayer.address, 10_000_000_000n);
  await ledger.mintUsdc(payer.address, FUNDED_MICRO_USDC);
  await ledger.createUsdcAccount(payTo.address);
  server = await startSolanaRpcServer(ledger);
  chains = await createSvmChains({
    networks: [{ name: NETWORK, rpcUrl: server.url, usdc: MINT }],
    solanaPrivateKey: payer.secretKeyBase58,
  });
});

afterAll(async () => {
  await server?.close();
});

function requirements(changes: Partial<PaymentRequirements> = {}): PaymentRequirements {
  return {
    scheme: 'exact',
    network: NETWORK,
    maxAmountRequired: '250000',
    resource: 'http://127.0.0.1/paid',
    description: '',
    mimeType: 'application/json',
    payTo: payTo.address,
    maxTimeoutSeconds: 60,
    asset: MINT,
    extra: { feePayer: feePayer.address },
    ...changes,
  };
}

async function build(changes: Partial<PaymentRequirements> = {}) {
  const built = await chains.buildExactPayment(requirements(changes));
  if (!built.ok) throw new Error(`${built.reason}: ${built.details}`);
  return built.value;
}

/** What the target's facilitator does with our X-PAYMENT: co-sign as fee payer and send. */
async function coSignAndSend(transactionBase64: string): Promise<string> {
  const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(transactionBase64));
  const signed = await partiallySignTransaction([feePayer.signer.keyPair], transaction);
  const rpc = chains.networks.get(NETWORK)!.rpc;
  const signature = await rpc.sendTransaction(getBase64EncodedWireTransaction(signed), { encoding: 'base64' }).send();
  expect(signature).toBe(getSignatureFromTransaction(signed));
  return signature;
}

describe('buildExactPayment', () => {
  it('uses the configured key, given as base58 or as a JSON byte array', async () => {
    expect(chains.signer?.address).toBe(payer.address);
    const fromJson = await createSvmChains({ networks: [], solanaPrivateKey: JSON.stringify([...payer.secretKey]) });
    expect(fromJson.signer?.address).toBe(payer.address);
    expect(() => solanaSecretKeyBytes(JSON.stringify([...payer.secretKey.slice(0, 32)]))).toThrow(ConfigError);
    expect(() => solanaSecretKeyBytes('[1,2,300]')).toThrow(ConfigError);
    const mismatched = new Uint8Array(payer.secretKey);
    mismatched.set(feePayer.secretKey.slice(32), 32);
    await expect(createSvmChains({ networks: [], solanaPrivateKey: JSON.stringify([...mismatched]) })).rejects.toThrow(ConfigError);
  });

  it('builds the exact-scheme shape: fee payer = facilitator, budget instructions, one TransferChecked of exactly the amount', async () => {
    const built = await build();
    const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(built.payment.payload.transaction));
    const compiled = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    expect(compiled.version).toBe(0);
    expect(compiled.staticAccounts[0]).toBe(feePayer.address);
    // Signed by us only; the fee payer's slot is left for the facilitator.
    expect(Object.keys(transaction.signatures).sort()).toEqual([feePayer.address, payer.address].sort());
    expect(transaction.signatures[feePayer.address]).toBeNull();
    expect(getBase58Decoder().decode(transaction.signatures[payer.address]!)).toBe(built.payerSignature);

    const instructions = decompileTransactionMessage(compiled).instructions as readonly Instruction[];
    expect(instructions.map((instruction) => instruction.programAddress)).toEqual([
      COMPUTE_BUDGET_PROGRAM_ADDRESS,
      COMPUTE_BUDGET_PROGRAM_ADDRESS,
      TOKEN_PROGRAM_ADDRESS,
    ]);
    for (const instruction of instructions) {
      expect(instruction.accounts?.map((account) => account.address) ?? []).not.toContain(feePayer.address);
    }
    const { units } = parseSetComputeUnitLimitInstruction(instructions[0] as never).data;
    expect(units).toBeGreaterThanOrEqual(COMPUTE_UNIT_LIMIT_RANGE.min);
    expect(units).toBeLessThanOrEqual(COMPUTE_UNIT_LIMIT_RANGE.max);
    const { microLamports } = parseSetComputeUnitPriceInstruction(instructions[1] as never).data;
    expect(microLamports).toBeGreaterThanOrEqual(BigInt(COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.min));
    expect(microLamports).toBeLessThanOrEqual(BigInt(COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE.max));
    const transfer = parseTransferCheckedInstruction(instructions[2] as never);
    expect(transfer.data.amount).toBe(250_000n);
    expect(transfer.data.decimals).toBe(6);
    expect(transfer.accounts.mint.address).toBe(MINT);
    expect(transfer.accounts.authority.address).toBe(payer.address);
    expect(transfer.accounts.source.address).toBe(await usdcAccountOf(payer.address, MINT));
    expect(transfer.accounts.destination.address).toBe(await usdcAccountOf(payTo.address, MINT));
    expect(built).toMatchObject({ network: NETWORK, payer: payer.address, feePayer: feePayer.address, amount: 250_000n });
    expect(built.payment).toMatchObject({ x402Version: 1, scheme: 'exact', network: NETWORK });
  });

  it('settles when the fee payer co-signs and sends: balances move by exactly the amount, our payer holds no SOL', async () => {
    const amount = 250_001n;
    const before = {
      payer: await ledger.usdcBalance(payer.address),
      payTo: await ledger.usdcBalance(payTo.address),
      feePayerLamports: ledger.lamports(feePayer.address),
    };
    expect(ledger.lamports(payer.address)).toBe(0n);
    const built = await build({ maxAmountRequired: amount.toString() });
    const signature = await coSignAndSend(built.payment.payload.transaction);

    const status = await chains.waitForSignature(NETWORK, signature, { timeoutMs: 5_000, pollMs: 20 });
    expect(status).toMatchObject({ ok: true, value: { found: true, failed: false, confirmationStatus: 'finalized' } });
    expect(await ledger.usdcBalance(payer.address)).toBe(before.payer - amount);
    expect(await ledger.usdcBalance(payTo.address)).toBe(before.payTo + amount);
    expect(await chains.usdcBalance(NETWORK, payer.address)).toEqual({ ok: true, value: before.payer - amount });
    expect(ledger.lamports(payer.address)).toBe(0n);
    expect(ledger.lamports(feePayer.address)).toBeLessThan(before.feePayerLamports);
  });

  it('makes two payments of the same amount to the same payTo distinct transactions, and both settle', async () => {
    // litesvm keeps one blockhash, as a cluster does within a slot: identical transactions would collide.
    const before = await ledger.usdcBalance(payTo.address);
    const first = await build({ maxAmountRequired: '1000' });
    const second = await build({ maxAmountRequired: '1000' });
    expect(second.payment.payload.transaction).not.toBe(first.payment.payload.transaction);
    const signatures = [await coSignAndSend(first.payment.payload.transaction), await coSignAndSend(second.payment.payload.transaction)];
    expect(new Set(signatures).size).toBe(2);
    expect(await ledger.usdcBalance(payTo.address)).toBe(before + 2_000n);
  });

  it("passes the harness facilitator's verification and settlement (shape, simulation, co-signature)", async () => {
    const facilitator = createSvmFacilitator(new Map([[NETWORK, server.url]]), feePayer.signer, new KeyedQueue());
    const before = await ledger.usdcBalance(payTo.address);
    const built = await build({ maxAmountRequired: '7' });
    const asked = requirements({ maxAmountRequired: '7' }) as HarnessRequirements;
    expect(await facilitator.verify(built.payment, asked)).toEqual({ isValid: true, payer: payer.address });
    const settled = await facilitator.settle(built.payment, asked);
    expect(settled).toMatchObject({ success: true, network: NETWORK, payer: payer.address });
    expect(await chains.signatureStatus(NETWORK, settled.transaction)).toMatchObject({ ok: true, value: { found: true, failed: false } });
    expect(await ledger.usdcBalance(payTo.address)).toBe(before + 7n);
  });

  it('refuses to pay into a missing token account, before building anything', async () => {
    const stranger = await generateSolanaKey();
    const blockhashCalls = server.callCounts.get('getLatestBlockhash') ?? 0;
    const balance = await ledger.usdcBalance(payer.address);
    const built = await chains.buildExactPayment(requirements({ payTo: stranger.address }));
    expect(built).toMatchObject({ ok: false, reason: 'destination_account_missing' });
    expect(server.callCounts.get('getLatestBlockhash') ?? 0).toBe(blockhashCalls);
    expect(await ledger.usdcBalance(payer.address)).toBe(balance);
  });

  it('refuses an amount over our balance, and a payer without a USDC account', async () => {
    const balance = await ledger.usdcBalance(payer.address);
    expect(await chains.buildExactPayment(requirements({ maxAmountRequired: (balance + 1n).toString() }))).toMatchObject({
      ok: false,
      reason: 'insufficient_funds',
    });
    expect((await chains.buildExactPayment(requirements({ maxAmountRequired: balance.toString() }))).ok).toBe(true);
    const empty = await generateSolanaKey();
    const emptyChains = await createSvmChains({
      networks: [{ name: NETWORK, rpcUrl: server.url, usdc: MINT }],
      solanaPrivateKey: empty.secretKeyBase58,
    });
    expect(await emptyChains.buildExactPayment(requirements({ maxAmountRequired: '1' }))).toMatchObject({ ok: false, reason: 'insufficient_funds' });
    expect(await emptyChains.usdcBalance(NETWORK, empty.address)).toEqual({ ok: true, value: 0n });
  });

  it('refuses requirements it must not pay', async () => {
    const cases: Array<[Partial<PaymentRequirements>, string]> = [
      [{ extra: {} }, 'missing_fee_payer'],
      [{ extra: { feePayer: 'not-an-address' } }, 'invalid_fee_payer'],
      [{ extra: { feePayer: payer.address } }, 'invalid_fee_payer'],
      [{ asset: NETWORK_TABLE.solana.usdc }, 'asset_mismatch'],
      [{ maxAmountRequired: '0' }, 'invalid_requirements'],
      [{ maxAmountRequired: (1n << 64n).toString() }, 'invalid_requirements'],
      [{ payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C' }, 'invalid_requirements'],
      [{ network: 'solana' }, 'network_not_enabled'],
      [{ network: 'base-sepolia' }, 'not_solana_network'],
    ];
    for (const [changes, reason] of cases) {
      expect(await chains.buildExactPayment(requirements(changes)), reason).toMatchObject({ ok: false, reason });
    }
    const keyless = await createSvmChains({ networks: [{ name: NETWORK, rpcUrl: server.url, usdc: MINT }], solanaPrivateKey: undefined });
    expect(await keyless.buildExactPayment(requirements())).toMatchObject({ ok: false, reason: 'no_wallet' });
  });

  it('answers signature statuses: unknown signatures are not found, malformed ones are refused', async () => {
    const unknown = getBase58Decoder().decode(new Uint8Array(64).fill(7));
    expect(await chains.signatureStatus(NETWORK, unknown)).toEqual({ ok: true, value: { found: false } });
    expect(await chains.signatureStatus(NETWORK, 'nope')).toMatchObject({ ok: false, reason: 'invalid_argument' });
    const started = Date.now();
    expect(await chains.waitForSignature(NETWORK, unknown, { timeoutMs: 200, pollMs: 20 })).toEqual({ ok: true, value: { found: false } });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('answers rpc_error or rpc_timeout when the endpoint is unreachable', async () => {
    const offline = await createSvmChains(
      { networks: [{ name: NETWORK, rpcUrl: 'http://127.0.0.1:9', usdc: MINT }], solanaPrivateKey: payer.secretKeyBase58 },
      { rpcTimeoutMs: 500 },
    );
    expect(await offline.buildExactPayment(requirements())).toMatchObject({ ok: false, reason: expect.stringMatching(/^rpc_(error|timeout)$/) });
    expect(await offline.usdcBalance(NETWORK, payer.address)).toMatchObject({ ok: false, reason: expect.stringMatching(/^rpc_/) });
  });
});
