// The exact-scheme Solana payment we send to targets, against a litesvm ledger behind the harness's
// JSON-RPC endpoint: our payer holds USDC and no SOL; a separate key stands in for the target's
// facilitator (fee payer), co-signs and sends. Balances move by exactly the amount.
// Then the other way round: the shapes of payment we accept from clients (legacy or v0, with or
// without a Memo) and refuse, by our own check and by the harness facilitator's.
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
import { getTransferSolInstruction } from '@solana-program/system';
import { TOKEN_PROGRAM_ADDRESS, parseTransferCheckedInstruction } from '@solana-program/token';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../payments/basics/config';
import {
  COMPUTE_UNIT_LIMIT_RANGE,
  COMPUTE_UNIT_PRICE_MICRO_LAMPORTS_RANGE,
  createSvmChains,
  solanaSecretKeyBytes,
  usdcAccountOf,
  type SvmChains,
} from '../../payments/chains/solana';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import {
  inspectSolanaPayment,
  MEMO_PROGRAM_ADDRESS,
  MEMO_V1_PROGRAM_ADDRESS,
} from '../../payments/chains/solana/shape';
import { DEFAULT_PAYMENT_BOUNDS } from '../../payments/incoming/types';
import type { PaymentPayload, PaymentRequirements } from '../../payments/x402/types';
import { createSvmFacilitator } from '../../devnet/facilitator/svm';
import { createSolanaPayment, memoInstruction, type SolanaPaymentOverrides } from '../../devnet/svm/payment-client';
import { KeyedQueue } from '../../devnet/key-queue';
import { generateSolanaKey, type SolanaKey } from '../../devnet/svm/keys';
import { SolanaLedger } from '../../devnet/svm/ledger';
import { startSolanaRpcServer, type SolanaRpcServer } from '../../devnet/svm/rpc-server';
import { ifStarted } from '../support/teardown';

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
  await ifStarted(server)?.close();
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
    await expect(createSvmChains({ networks: [], solanaPrivateKey: JSON.stringify([...mismatched]) })).rejects.toThrow(
      ConfigError,
    );
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
    expect(built).toMatchObject({
      network: NETWORK,
      payer: payer.address,
      feePayer: feePayer.address,
      amount: 250_000n,
    });
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
    expect(status).toMatchObject({
      ok: true,
      value: { kind: 'found', failed: false, confirmationStatus: 'finalized' },
    });
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
    const signatures = [
      await coSignAndSend(first.payment.payload.transaction),
      await coSignAndSend(second.payment.payload.transaction),
    ];
    expect(new Set(signatures).size).toBe(2);
    expect(await ledger.usdcBalance(payTo.address)).toBe(before + 2_000n);
  });

  it("passes the harness facilitator's verification and settlement (shape, simulation, co-signature)", async () => {
    const facilitator = createSvmFacilitator(new Map([[NETWORK, server.url]]), feePayer.signer, new KeyedQueue());
    const before = await ledger.usdcBalance(payTo.address);
    const built = await build({ maxAmountRequired: '7' });
    const asked = requirements({ maxAmountRequired: '7' });
    expect(await facilitator.verify(built.payment, asked)).toEqual({ isValid: true, payer: payer.address });
    const settled = await facilitator.settle(built.payment, asked);
    expect(settled).toMatchObject({ success: true, network: NETWORK, payer: payer.address });
    expect(await chains.signatureStatus(NETWORK, settled.transaction)).toMatchObject({
      ok: true,
      value: { kind: 'found', failed: false },
    });
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
    expect(
      await chains.buildExactPayment(requirements({ maxAmountRequired: (balance + 1n).toString() })),
    ).toMatchObject({
      ok: false,
      reason: 'insufficient_funds',
    });
    expect((await chains.buildExactPayment(requirements({ maxAmountRequired: balance.toString() }))).ok).toBe(true);
    const empty = await generateSolanaKey();
    const emptyChains = await createSvmChains({
      networks: [{ name: NETWORK, rpcUrl: server.url, usdc: MINT }],
      solanaPrivateKey: empty.secretKeyBase58,
    });
    expect(await emptyChains.buildExactPayment(requirements({ maxAmountRequired: '1' }))).toMatchObject({
      ok: false,
      reason: 'insufficient_funds',
    });
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
    const keyless = await createSvmChains({
      networks: [{ name: NETWORK, rpcUrl: server.url, usdc: MINT }],
      solanaPrivateKey: undefined,
    });
    expect(await keyless.buildExactPayment(requirements())).toMatchObject({ ok: false, reason: 'no_wallet' });
  });

  it('answers signature statuses: unknown signatures are not found, malformed ones are refused', async () => {
    const unknown = getBase58Decoder().decode(new Uint8Array(64).fill(7));
    expect(await chains.signatureStatus(NETWORK, unknown)).toEqual({ ok: true, value: { kind: 'not_found' } });
    expect(await chains.signatureStatus(NETWORK, 'nope')).toMatchObject({ ok: false, reason: 'invalid_argument' });
    const started = Date.now();
    expect(await chains.waitForSignature(NETWORK, unknown, { timeoutMs: 200, pollMs: 20 })).toEqual({
      ok: true,
      value: { kind: 'not_found' },
    });
    // Given up at its bound, not waited for forever (generous: a loaded machine is slow, not wrong).
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('answers rpc_error or rpc_timeout when the endpoint is unreachable', async () => {
    const offline = await createSvmChains(
      {
        networks: [{ name: NETWORK, rpcUrl: 'http://127.0.0.1:9', usdc: MINT }],
        solanaPrivateKey: payer.secretKeyBase58,
      },
      { rpcTimeoutMs: 500 },
    );
    expect(await offline.buildExactPayment(requirements())).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^rpc_(error|timeout)$/),
    });
    expect(await offline.usdcBalance(NETWORK, payer.address)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/^rpc_/),
    });
  });
});

describe('payments from clients: the shapes we accept and refuse', () => {
  const PRICE = '4321';
  const offered = () => requirements({ maxAmountRequired: PRICE });
  // litesvm keeps one blockhash: each payment gets its own compute unit limit so that none repeats another.
  let paymentCount = 0;
  async function clientPayment(overrides: SolanaPaymentOverrides = {}) {
    paymentCount += 1;
    const built = await createSolanaPayment(payer.signer, offered(), server.url, {
      computeUnitLimit: 30_000 + paymentCount,
      ...overrides,
    });
    return built.payment as PaymentPayload & typeof built.payment;
  }
  function layoutOf(payment: { payload: { transaction: string } }) {
    const transaction = getTransactionDecoder().decode(getBase64Encoder().encode(payment.payload.transaction));
    const compiled = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    const instructions = decompileTransactionMessage(compiled).instructions as readonly Instruction[];
    const programs = instructions.map((instruction) => instruction.programAddress);
    return { version: compiled.version, programs };
  }
  const inspect = (payment: PaymentPayload) => inspectSolanaPayment(payment, offered(), MINT, DEFAULT_PAYMENT_BOUNDS);
  const BUDGET = COMPUTE_BUDGET_PROGRAM_ADDRESS;
  const TOKEN = TOKEN_PROGRAM_ADDRESS;

  it('accepts legacy and v0 messages, each with or without one Memo after the compute budget', async () => {
    const cases: Array<[string, SolanaPaymentOverrides, 'legacy' | 0, Address[]]> = [
      ['v0', {}, 0, [BUDGET, BUDGET, TOKEN]],
      ['legacy (as HTTPayer builds it)', { version: 'legacy' }, 'legacy', [BUDGET, BUDGET, TOKEN]],
      [
        'v0 with a Memo after the transfer (as @x402/svm builds it)',
        { memo: 'f0e1d2c3b4a5968778695a4b3c2d1e0f' },
        0,
        [BUDGET, BUDGET, TOKEN, MEMO_PROGRAM_ADDRESS],
      ],
      [
        'legacy with a Memo',
        { version: 'legacy', memo: 'order 42' },
        'legacy',
        [BUDGET, BUDGET, TOKEN, MEMO_PROGRAM_ADDRESS],
      ],
      [
        'a Memo before the transfer',
        { instructions: (s) => [s[0]!, s[1]!, memoInstruction('before'), s[2]!] },
        0,
        [BUDGET, BUDGET, MEMO_PROGRAM_ADDRESS, TOKEN],
      ],
      [
        'a first-version Memo signed by the payer',
        {
          version: 'legacy',
          instructions: (s) => [
            ...s,
            memoInstruction('signed', { programAddress: MEMO_V1_PROGRAM_ADDRESS, signers: [payer.address] }),
          ],
        },
        'legacy',
        [BUDGET, BUDGET, TOKEN, MEMO_V1_PROGRAM_ADDRESS],
      ],
    ];
    const destination = await usdcAccountOf(payTo.address, MINT);
    const source = await usdcAccountOf(payer.address, MINT);
    for (const [name, overrides, version, programs] of cases) {
      const payment = await clientPayment(overrides);
      expect(layoutOf(payment), name).toEqual({ version, programs });
      const inspected = await inspect(payment);
      expect(inspected.ok ? undefined : inspected, name).toBeUndefined();
      expect(inspected.ok && inspected.value, name).toMatchObject({
        feePayer: feePayer.address,
        payer: payer.address,
        source,
        destination,
        amount: 4321n,
      });
    }
  });

  it('refuses two Memos, a Memo signed by the fee payer or a third party, any other instruction, lookup tables; legacy as strictly as v0', async () => {
    const stranger = await generateSolanaKey();
    const solTransfer = () =>
      getTransferSolInstruction({ source: payer.signer, destination: payTo.address, amount: 1n });
    const cases: Array<[string, SolanaPaymentOverrides, RegExp]> = [
      ['invalid_transaction', { memo: 'one', instructions: (s) => [...s, memoInstruction('two')] }, /found 5/],
      [
        'invalid_transaction',
        { instructions: (s) => [s[0]!, s[1]!, memoInstruction('one'), memoInstruction('two')] },
        /more than one Memo/,
      ],
      [
        'fee_payer_in_instruction',
        { instructions: (s) => [...s, memoInstruction('ours', { signers: [feePayer.address] })] },
        /fee payer/,
      ],
      [
        'invalid_transaction',
        { version: 'legacy', instructions: (s) => [...s, memoInstruction('theirs', { signers: [stranger.address] })] },
        /other than the payer/,
      ],
      ['invalid_transaction', { instructions: (s) => [...s, solTransfer()] }, /instruction 4 is neither/],
      ['invalid_transaction', { version: 'legacy', memo: 'x', instructions: (s) => [...s, solTransfer()] }, /found 5/],
      [
        'invalid_transaction',
        { instructions: (s) => [s[0]!, s[1]!, memoInstruction('no transfer')] },
        /TransferChecked/,
      ],
      ['invalid_transaction', { addressLookupTables: { [stranger.address]: [MINT] } }, /lookup tables/],
      [
        'invalid_transaction',
        { instructions: (s) => [...s, { programAddress: MEMO_PROGRAM_ADDRESS, data: new Uint8Array([0xff, 0xfe]) }] },
        /UTF-8/,
      ],
      ['invalid_transaction', { version: 'legacy', instructions: (s) => [s[1]!, s[0]!, s[2]!] }, /SetComputeUnitLimit/],
      ['compute_budget_too_high', { version: 'legacy', memo: 'x', computeUnitPriceMicroLamports: 5_000_001n }, /price/],
      ['wrong_amount', { version: 'legacy', memo: 'x', amount: 4320n }, /4320/],
      [
        'wrong_recipient',
        { version: 'legacy', destination: await usdcAccountOf(payer.address, MINT) },
        /not the USDC account/,
      ],
      ['wrong_asset', { version: 'legacy', decimals: 9 }, /decimals/],
      ['wrong_fee_payer', { version: 'legacy', memo: 'x', feePayer: stranger.address }, /fee payer/],
    ];
    for (const [reason, overrides, details] of cases) {
      const result = await inspect(await clientPayment(overrides));
      expect(result.ok ? { reason: 'accepted' } : { reason: result.reason }, String(details)).toEqual({ reason });
      if (!result.ok) expect(result.details).toMatch(details);
    }
  });

  it('the harness facilitator verifies and settles legacy and Memo payments exactly, and refuses what we refuse', async () => {
    const facilitator = createSvmFacilitator(new Map([[NETWORK, server.url]]), feePayer.signer, new KeyedQueue());
    const asked = offered();
    for (const overrides of [
      { version: 'legacy' },
      { memo: 'v0' },
      { version: 'legacy', memo: 'legacy' },
    ] as SolanaPaymentOverrides[]) {
      expect(await facilitator.verify(await clientPayment(overrides), asked), JSON.stringify(overrides)).toEqual({
        isValid: true,
        payer: payer.address,
      });
    }
    const refusals: Array<[string, SolanaPaymentOverrides]> = [
      [
        'invalid_exact_svm_payload_transaction_instructions_length',
        { memo: 'one', instructions: (s) => [...s, memoInstruction('two')] },
      ],
      [
        'invalid_exact_svm_payload_transaction_instructions_duplicate_memo',
        { instructions: (s) => [s[0]!, s[1]!, memoInstruction('a'), memoInstruction('b')] },
      ],
      [
        'invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts',
        { instructions: (s) => [...s, memoInstruction('x', { signers: [feePayer.address] })] },
      ],
      [
        'invalid_exact_svm_payload_transaction_instructions_length',
        {
          version: 'legacy',
          instructions: (s) => [
            ...s,
            getTransferSolInstruction({ source: payer.signer, destination: payTo.address, amount: 1n }),
          ],
        },
      ],
      ['invalid_exact_svm_payload_transaction', { addressLookupTables: { [payTo.address]: [MINT] } }],
    ];
    for (const [invalidReason, overrides] of refusals) {
      expect(await facilitator.verify(await clientPayment(overrides), asked)).toMatchObject({
        isValid: false,
        invalidReason,
      });
    }

    const before = { payer: await ledger.usdcBalance(payer.address), payTo: await ledger.usdcBalance(payTo.address) };
    const payment = await clientPayment({ version: 'legacy', memo: 'settled' });
    const settled = await facilitator.settle(payment, asked);
    expect(settled).toMatchObject({ success: true, payer: payer.address });
    expect(await ledger.usdcBalance(payer.address)).toBe(before.payer - 4321n);
    expect(await ledger.usdcBalance(payTo.address)).toBe(before.payTo + 4321n);
    // What landed is the client's legacy message, with the fee payer's signature in the first slot.
    const landed = await chains.transactionSignatures(NETWORK, settled.transaction);
    const sent = getTransactionDecoder().decode(getBase64Encoder().encode(payment.payload.transaction));
    expect(landed).toMatchObject({ ok: true, value: { kind: 'found', failed: false } });
    if (!landed.ok || landed.value.kind !== 'found') return;
    expect(Object.keys(landed.value.signatures)).toEqual([feePayer.address, payer.address]);
    expect(landed.value.signatures[feePayer.address]).toBe(settled.transaction);
    expect(landed.value.signatures[payer.address]).toBe(getBase58Decoder().decode(sent.signatures[payer.address]!));
  });
});
