// The facilitator's verification is strict: each field of a payment that differs from what was
// asked is refused with its own reason, and nothing settles. Calls go straight to its HTTP API.
import { getSetComputeUnitPriceInstruction } from '@solana-program/compute-budget';
import { getTransferCheckedInstruction, findAssociatedTokenPda, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import type { Address as SolanaAddress } from '@solana/kit';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomNonce } from '../../devnet/evm/authorization.js';
import {
  startPeers,
  type PaymentPayload,
  type PaymentRequiredBody,
  type PaymentRequirements,
  type Peers,
  type SettleResponse,
  type VerifyResponse,
} from '../../devnet/index.js';
import { generateSolanaKey } from '../../devnet/svm/keys.js';
import { ifStarted } from '../support/teardown';

const PRICE = 25_000n;
let peers: Peers;
let evmRequirements: PaymentRequirements;
let skaleRequirements: PaymentRequirements;
let solanaRequirements: PaymentRequirements;

async function requirementsOf(url: string): Promise<PaymentRequirements> {
  const body = (await (await fetch(url)).json()) as PaymentRequiredBody;
  return body.accepts[0]!;
}

interface Answers {
  '/verify': VerifyResponse;
  '/settle': SettleResponse;
}

async function post<Path extends keyof Answers>(
  path: Path,
  payment: unknown,
  requirements: unknown,
): Promise<{ status: number; answer: Answers[Path] }> {
  const response = await fetch(`${peers.facilitator.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ x402Version: 1, paymentPayload: payment, paymentRequirements: requirements }),
  });
  return { status: response.status, answer: (await response.json()) as Answers[Path] };
}

async function verify(
  payment: PaymentPayload,
  requirements: PaymentRequirements = evmRequirements,
): Promise<VerifyResponse> {
  const { status, answer } = await post('/verify', payment, requirements);
  expect(status).toBe(200);
  return answer;
}

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base-sepolia', 'skale-base', 'solana-devnet'],
    pricesMicroUsdc: { paid: PRICE },
  });
  evmRequirements = await requirementsOf(peers.targets['base-sepolia']!.routes.paid.url);
  skaleRequirements = await requirementsOf(peers.targets['skale-base']!.routes.paid.url);
  solanaRequirements = await requirementsOf(peers.targets['solana-devnet']!.routes.paid.url);
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

describe('GET /supported', () => {
  it('lists the exact scheme on every running network, with the Solana fee payer', async () => {
    const response = await fetch(`${peers.facilitator.url}/supported`);
    expect(await response.json()).toEqual({
      kinds: [
        { x402Version: 1, scheme: 'exact', network: 'base-sepolia' },
        { x402Version: 1, scheme: 'exact', network: 'skale-base' },
        {
          x402Version: 1,
          scheme: 'exact',
          network: 'solana-devnet',
          extra: { feePayer: peers.facilitator.solanaFeePayer },
        },
      ],
    });
  });
});

describe('EVM verification', () => {
  it('accepts exactly what was asked, without moving anything', async () => {
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance('base-sepolia', payer);
    const { payment } = await peers.signEvmPayment(evmRequirements);
    expect(await verify(payment)).toEqual({ isValid: true, payer });
    expect((await verify((await peers.signEvmPayment(skaleRequirements)).payment, skaleRequirements)).isValid).toBe(
      true,
    );
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(before);
  });

  const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000));
  it.each([
    ['more than the price', () => ({ value: PRICE + 1n }), 'invalid_exact_evm_payload_authorization_value'],
    ['less than the price', () => ({ value: PRICE - 1n }), 'invalid_exact_evm_payload_authorization_value'],
    [
      'another recipient',
      () => ({ to: privateKeyToAccount(generatePrivateKey()).address }),
      'invalid_exact_evm_payload_recipient_mismatch',
    ],
    [
      'a validAfter not yet passed',
      () => ({ validAfter: nowSeconds() + 30n }),
      'invalid_exact_evm_payload_authorization_valid_after',
    ],
    [
      'a validBefore too close',
      () => ({ validBefore: nowSeconds() + 3n }),
      'invalid_exact_evm_payload_authorization_valid_before',
    ],
    [
      'an expired authorization',
      () => ({ validBefore: nowSeconds() - 1n }),
      'invalid_exact_evm_payload_authorization_valid_before',
    ],
    ['a signature for another chain', () => ({ domain: { chainId: 8453 } }), 'invalid_exact_evm_payload_signature'],
    [
      'a signature for another token name',
      () => ({ domain: { name: 'USD Coin' } }),
      'invalid_exact_evm_payload_signature',
    ],
    ['a payment naming another network', () => ({ network: 'base' }), 'invalid_network'],
  ] as const)('refuses %s', async (_case, overrides, reason) => {
    const { payment } = await peers.signEvmPayment(evmRequirements, overrides());
    expect(await verify(payment)).toMatchObject({ isValid: false, invalidReason: reason });
  });

  it('refuses a signature made by someone other than `from`', async () => {
    const { payment } = await peers.signEvmPayment(evmRequirements, {}, generatePrivateKey());
    payment.payload.authorization.from = peers.wallets.client.evm.address;
    expect(await verify(payment)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_evm_payload_signature',
    });
  });

  it('refuses requirements for another asset', async () => {
    const { payment } = await peers.signEvmPayment(evmRequirements);
    const otherAsset = { ...evmRequirements, asset: skaleRequirements.asset };
    expect(await verify(payment, otherAsset)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_payment_requirements',
    });
  });

  it('refuses a payer without the funds', async () => {
    const { payment } = await peers.signEvmPayment(evmRequirements, {}, generatePrivateKey());
    expect(await verify(payment)).toMatchObject({ isValid: false, invalidReason: 'insufficient_funds' });
  });

  it('refuses malformed bodies with 400 and unknown networks as invalid', async () => {
    expect((await post('/verify', undefined, evmRequirements)).status).toBe(400);
    expect(
      (await post('/settle', { x402Version: 1 }, { network: 'base-sepolia', maxAmountRequired: '1.5' })).status,
    ).toBe(400);
    const { payment } = await peers.signEvmPayment(evmRequirements);
    const unknown = await post(
      '/verify',
      { ...payment, network: 'polygon' },
      { ...evmRequirements, network: 'polygon' },
    );
    expect(unknown.answer).toMatchObject({ isValid: false, invalidReason: 'invalid_network' });
  });

  it('settles a valid payment once; the second settlement and a later verification are refused', async () => {
    const payer = peers.wallets.client.evm.address;
    const payee = evmRequirements.payTo;
    const [payerBefore, payeeBefore] = await Promise.all([
      peers.usdcBalance('base-sepolia', payer),
      peers.usdcBalance('base-sepolia', payee),
    ]);
    const { payment } = await peers.signEvmPayment(evmRequirements, { nonce: randomNonce() });

    const first = await post('/settle', payment, evmRequirements);
    const second = await post('/settle', payment, evmRequirements);

    expect(first.answer).toMatchObject({ success: true, network: 'base-sepolia', payer });
    expect(first.answer.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(second.answer).toMatchObject({ success: false, errorReason: 'nonce_already_used', transaction: '' });
    expect(await verify(payment)).toMatchObject({ isValid: false, invalidReason: 'nonce_already_used' });
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(payerBefore - PRICE);
    expect(await peers.usdcBalance('base-sepolia', payee)).toBe(payeeBefore + PRICE);
  });

  it('settles ten different authorizations sent at once, each exactly once', async () => {
    const payer = peers.wallets.client.evm.address;
    const before = await peers.usdcBalance('base-sepolia', payer);
    const payments = await Promise.all(Array.from({ length: 10 }, () => peers.signEvmPayment(evmRequirements)));
    const answers = await Promise.all(payments.map(({ payment }) => post('/settle', payment, evmRequirements)));
    expect(answers.map(({ answer }) => answer.success)).toEqual(Array(10).fill(true));
    expect(new Set(answers.map(({ answer }) => answer.transaction)).size).toBe(10);
    expect(await peers.usdcBalance('base-sepolia', payer)).toBe(before - 10n * PRICE);
  });
});

describe('Solana verification', () => {
  it('accepts the shape of docs/architecture.md section 4 without moving anything', async () => {
    const payer = peers.wallets.client.solana.address;
    const before = await peers.usdcBalance('solana-devnet', payer);
    const { payment } = await peers.createSolanaPayment(solanaRequirements);
    expect(await verify(payment, solanaRequirements)).toEqual({ isValid: true, payer });
    expect(await peers.usdcBalance('solana-devnet', payer)).toBe(before);
  });

  const mint = () => solanaRequirements.asset as SolanaAddress;
  it.each([
    ['more than the price', () => ({ amount: PRICE + 1n }), 'invalid_exact_svm_payload_transaction_amount_mismatch'],
    ['less than the price', () => ({ amount: PRICE - 1n }), 'invalid_exact_svm_payload_transaction_amount_mismatch'],
    ['other decimals', () => ({ decimals: 9 }), 'invalid_exact_svm_payload_transaction_decimals_mismatch'],
    [
      'a compute unit price above the ceiling',
      () => ({ computeUnitPriceMicroLamports: 5_000_001n }),
      'invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high',
    ],
    ['another network named in X-PAYMENT', () => ({ network: 'solana' }), 'invalid_network'],
    [
      'a payment into an account that is not the payTo’s associated account',
      async () => {
        const [own] = await findAssociatedTokenPda({
          mint: mint(),
          owner: peers.wallets.client.solana.address,
          tokenProgram: TOKEN_PROGRAM_ADDRESS,
        });
        return { destination: own };
      },
      'invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata',
    ],
    [
      'a fourth instruction',
      () => ({
        instructions: (standard: never[]) => [...standard, getSetComputeUnitPriceInstruction({ microLamports: 1n })],
      }),
      'invalid_exact_svm_payload_transaction_instructions_length',
    ],
    [
      'instructions in another order',
      () => ({ instructions: (standard: never[]) => [standard[2], standard[0], standard[1]] }),
      'invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction',
    ],
    [
      'another fee payer',
      () => ({ feePayer: peers.wallets.service.solana.address }),
      'invalid_exact_svm_payload_transaction_fee_payer_mismatch',
    ],
  ] as const)('refuses %s', async (_case, overrides, reason) => {
    const { payment } = await peers.createSolanaPayment(solanaRequirements, (await overrides()) as never);
    expect(await verify(payment, solanaRequirements)).toMatchObject({ isValid: false, invalidReason: reason });
  });

  it('refuses a transfer whose authority is the fee payer', async () => {
    const feePayer = peers.facilitator.solanaFeePayer as SolanaAddress;
    const [feePayerAccount] = await findAssociatedTokenPda({
      mint: mint(),
      owner: feePayer,
      tokenProgram: TOKEN_PROGRAM_ADDRESS,
    });
    const [payToAccount] = await findAssociatedTokenPda({
      mint: mint(),
      owner: solanaRequirements.payTo as SolanaAddress,
      tokenProgram: TOKEN_PROGRAM_ADDRESS,
    });
    const drain = getTransferCheckedInstruction({
      source: feePayerAccount,
      mint: mint(),
      destination: payToAccount,
      authority: feePayer,
      amount: PRICE,
      decimals: 6,
    });
    const { payment } = await peers.createSolanaPayment(solanaRequirements, {
      instructions: (standard) => [standard[0]!, standard[1]!, drain],
    });
    expect(await verify(payment, solanaRequirements)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts',
    });
  });

  it('refuses a payer without funds, and a payTo without a USDC account', async () => {
    const poor = await generateSolanaKey();
    await peers.mint('solana-devnet', poor.address, PRICE - 1n);
    const { payment: short } = await peers.createSolanaPayment(solanaRequirements, {}, poor.secretKey);
    expect(await verify(short, solanaRequirements)).toMatchObject({
      isValid: false,
      invalidReason: 'insufficient_funds',
      payer: poor.address,
    });

    const nowhere = { ...solanaRequirements, payTo: (await generateSolanaKey()).address };
    const { payment: lost } = await peers.createSolanaPayment(nowhere);
    expect(await verify(lost, nowhere)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_svm_payload_transaction_receiver_ata_not_found',
    });
  });

  it('refuses a transaction the payer did not sign', async () => {
    const { payment } = await peers.createSolanaPayment(solanaRequirements);
    const wire = Buffer.from(payment.payload.transaction, 'base64');
    // Wire layout: signature count, then 64-byte signatures; the payer's is the second.
    wire.fill(0, 1 + 64, 1 + 128);
    payment.payload.transaction = wire.toString('base64');
    expect(await verify(payment, solanaRequirements)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_svm_payload_transaction_signatures',
    });
  });

  it('refuses a signature that does not match the message, in simulation', async () => {
    const { payment } = await peers.createSolanaPayment(solanaRequirements);
    const wire = Buffer.from(payment.payload.transaction, 'base64');
    wire[1 + 64]! ^= 0xff;
    payment.payload.transaction = wire.toString('base64');
    expect(await verify(payment, solanaRequirements)).toMatchObject({
      isValid: false,
      invalidReason: 'invalid_exact_svm_payload_transaction_simulation_failed',
    });
  });

  it('settles once; the same transaction again is a duplicate and moves nothing', async () => {
    const payer = peers.wallets.client.solana.address;
    const before = await peers.usdcBalance('solana-devnet', payer);
    const { payment } = await peers.createSolanaPayment(solanaRequirements);
    const [first, second] = await Promise.all([
      post('/settle', payment, solanaRequirements),
      post('/settle', payment, solanaRequirements),
    ]);
    expect([first.answer.success, second.answer.success].sort()).toEqual([false, true]);
    expect([first.answer.errorReason, second.answer.errorReason]).toContain('duplicate_settlement');
    expect(await peers.usdcBalance('solana-devnet', payer)).toBe(before - PRICE);
  });
});
