/**
 * The shape of a Solana exact payment paid to us (docs/architecture.md section 4), checked without the
 * cluster (pure but for hashing and signature verification).
 *
 * A legacy or v0 message (v0 without address lookup tables: every account must be visible here)
 * whose fee payer is the one we offered; SetComputeUnitLimit then SetComputeUnitPrice, bounded;
 * then one TransferChecked of exactly the amount, of USDC with 6 decimals, into the associated
 * token account of our payTo, and at most one Memo before or after it (x402's own client adds one
 * after the transfer so that equal payments are distinct transactions). Nothing else. Two signers
 * only: the fee payer, still unsigned, and the transfer authority, whose signature must verify.
 * The fee payer takes part in no instruction, so our signature can move nothing of ours.
 */
import {
  decompileTransactionMessage,
  getBase58Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getPublicKeyFromAddress,
  getTransactionDecoder,
  isAddress,
  verifySignature,
  type Address,
  type Blockhash,
  type Instruction,
  type Transaction,
} from '@solana/kit';
import {
  COMPUTE_BUDGET_PROGRAM_ADDRESS,
  ComputeBudgetInstruction,
  identifyComputeBudgetInstruction,
  parseSetComputeUnitLimitInstruction,
  parseSetComputeUnitPriceInstruction,
} from '@solana-program/compute-budget';
import {
  identifyTokenInstruction,
  parseTransferCheckedInstruction,
  TOKEN_PROGRAM_ADDRESS,
  TokenInstruction,
} from '@solana-program/token';
import { USDC_DECIMALS, usdcAccountOf } from './transactions';
import { type ExactSvmPayload, type PaymentPayload, type PaymentRequirements } from '../../x402/types';
import { fail, ok, type Result } from '../../basics/result';
import type { PaymentBounds } from '../../basics/paymentBounds';
import type { VerifyFailureReason } from '../types';

/** SPL Memo (the one x402's client uses) and its first version: both only log their data. */
export const MEMO_PROGRAM_ADDRESS = 'MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr' as Address;
export const MEMO_V1_PROGRAM_ADDRESS = 'Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo' as Address;

export interface InspectedSolanaPayment {
  transaction: Transaction;
  feePayer: Address;
  payer: Address;
  source: Address;
  destination: Address;
  amount: bigint;
  blockhash: Blockhash;
  /** The payer's signature (base58): the payment's idempotency key. */
  payerSignature: string;
}

type Failure = { ok: false; reason: VerifyFailureReason; details: string };

const invalid = (details: string): Failure => fail('invalid_transaction', details);

/** Whether this is the compute budget program's instruction of this kind (a local facilitator checks the same). */
export function isComputeBudget(instruction: Instruction, kind: ComputeBudgetInstruction): boolean {
  if (instruction.programAddress !== COMPUTE_BUDGET_PROGRAM_ADDRESS || instruction.data === undefined) return false;
  try {
    return identifyComputeBudgetInstruction(instruction.data) === kind;
  } catch {
    return false;
  }
}

export function isMemo(instruction: Instruction): boolean {
  return instruction.programAddress === MEMO_PROGRAM_ADDRESS || instruction.programAddress === MEMO_V1_PROGRAM_ADDRESS;
}

export function isTransferChecked(instruction: Instruction): boolean {
  if (instruction.programAddress !== TOKEN_PROGRAM_ADDRESS || instruction.data === undefined) return false;
  try {
    return identifyTokenInstruction(instruction.data) === TokenInstruction.TransferChecked;
  } catch {
    return false;
  }
}

function isUtf8(bytes: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

interface Layout {
  limit: Instruction;
  price: Instruction;
  transfer: Instruction;
  memo: Instruction | undefined;
}

/** Which instruction is which; the instructions' contents are checked by the caller. */
function layoutOf(instructions: readonly Instruction[]): Result<Layout, VerifyFailureReason> {
  if (instructions.length !== 3 && instructions.length !== 4)
    return invalid(`expected 3 instructions, or 4 with a Memo, found ${instructions.length}`);
  const [limit, price, ...rest] = instructions as [Instruction, Instruction, ...Instruction[]];
  if (!isComputeBudget(limit, ComputeBudgetInstruction.SetComputeUnitLimit))
    return invalid('the first instruction is not SetComputeUnitLimit');
  if (!isComputeBudget(price, ComputeBudgetInstruction.SetComputeUnitPrice))
    return invalid('the second instruction is not SetComputeUnitPrice');
  let transfer: Instruction | undefined;
  let memo: Instruction | undefined;
  for (const [index, instruction] of rest.entries()) {
    if (isMemo(instruction)) {
      if (memo) return invalid('more than one Memo instruction');
      memo = instruction;
    } else if (transfer === undefined) {
      transfer = instruction;
    } else {
      return invalid(`instruction ${index + 3} is neither the transfer nor a Memo`);
    }
  }
  if (transfer === undefined) return invalid('there is no TransferChecked instruction');
  return ok({ limit, price, transfer, memo });
}

export async function inspectSolanaPayment(
  payment: PaymentPayload,
  offered: PaymentRequirements,
  mint: Address,
  limits: PaymentBounds,
): Promise<Result<InspectedSolanaPayment, VerifyFailureReason>> {
  const feePayer = offered.extra?.feePayer;
  if (offered.asset !== mint) return fail('invalid_offer', `the offered asset ${offered.asset} is not USDC (${mint})`);
  if (
    typeof feePayer !== 'string' ||
    !isAddress(feePayer) ||
    !isAddress(offered.payTo) ||
    !/^[1-9][0-9]*$/.test(offered.maxAmountRequired)
  ) {
    return fail('invalid_offer', 'the offered feePayer, payTo or amount is not valid');
  }

  let transaction: Transaction;
  let instructions: readonly Instruction[];
  let staticAccounts: readonly Address[];
  let signerCount: number;
  let blockhash: Blockhash;
  try {
    transaction = getTransactionDecoder().decode(
      getBase64Encoder().encode((payment.payload as ExactSvmPayload).transaction),
    );
    const compiled = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    if (compiled.version !== 'legacy' && compiled.version !== 0)
      return invalid(`the message is version ${String(compiled.version)}, not legacy or 0`);
    if (compiled.version === 0 && (compiled.addressTableLookups?.length ?? 0) > 0)
      return invalid('the message uses address lookup tables');
    staticAccounts = compiled.staticAccounts;
    signerCount = compiled.header.numSignerAccounts;
    blockhash = compiled.lifetimeToken as Blockhash;
    instructions = decompileTransactionMessage(compiled).instructions;
  } catch (error) {
    return invalid(`not a legacy or v0 transaction: ${error instanceof Error ? error.message : String(error)}`);
  }

  if (staticAccounts[0] !== feePayer)
    return fail('wrong_fee_payer', `the fee payer is ${staticAccounts[0]}, not ${feePayer}`);
  const layout = layoutOf(instructions);
  if (!layout.ok) return layout;
  const { limit, price, transfer, memo } = layout.value;
  const units = parseSetComputeUnitLimitInstruction(limit as Parameters<typeof parseSetComputeUnitLimitInstruction>[0])
    .data.units;
  const { microLamports } = parseSetComputeUnitPriceInstruction(
    price as Parameters<typeof parseSetComputeUnitPriceInstruction>[0],
  ).data;
  if (units > limits.maxComputeUnitLimit)
    return fail('compute_budget_too_high', `compute unit limit ${units} is over ${limits.maxComputeUnitLimit}`);
  if (microLamports > limits.maxComputeUnitPriceMicroLamports) {
    return fail(
      'compute_budget_too_high',
      `compute unit price ${microLamports} is over ${limits.maxComputeUnitPriceMicroLamports} micro-lamports`,
    );
  }
  if (instructions.some((instruction) => instruction.accounts?.some((account) => account.address === feePayer))) {
    return fail('fee_payer_in_instruction', 'the fee payer takes part in an instruction');
  }

  if (!isTransferChecked(transfer) || transfer.accounts?.length !== 4)
    return invalid('the transfer is not a single-signer TransferChecked of the token program');
  const parsed = parseTransferCheckedInstruction(transfer as Parameters<typeof parseTransferCheckedInstruction>[0]);
  const payer = parsed.accounts.authority.address;
  if (parsed.accounts.mint.address !== mint)
    return fail('wrong_asset', `the transfer moves ${parsed.accounts.mint.address}, not USDC`);
  if (parsed.data.decimals !== USDC_DECIMALS)
    return fail('wrong_asset', `the transfer has ${parsed.data.decimals} decimals, USDC has ${USDC_DECIMALS}`);
  const amount = BigInt(offered.maxAmountRequired);
  if (parsed.data.amount !== amount)
    return fail('wrong_amount', `the transfer is of ${parsed.data.amount}, the price is ${amount}`);
  const destination = await usdcAccountOf(offered.payTo, mint);
  if (parsed.accounts.destination.address !== destination) {
    return fail(
      'wrong_recipient',
      `the transfer pays into ${parsed.accounts.destination.address}, not the USDC account of ${offered.payTo}`,
    );
  }

  // A Memo's accounts are signers of its text: only the payer may sign it, so it adds no signer.
  if (memo) {
    if (memo.accounts?.some((account) => account.address !== payer))
      return invalid('the Memo names an account other than the payer');
    if (!isUtf8(new Uint8Array(memo.data ?? []))) return invalid('the Memo is not UTF-8 text');
  }

  // Exactly two signers: the fee payer (ours to sign) and the transfer authority (signed).
  if (signerCount !== 2 || staticAccounts[1] !== payer)
    return invalid('the signers are not exactly the fee payer and the transfer authority');
  if (transaction.signatures[feePayer] !== null && transaction.signatures[feePayer] !== undefined)
    return invalid('the fee payer has already signed');
  const payerSignature = transaction.signatures[payer];
  if (!payerSignature) return fail('invalid_signature', 'the payer has not signed');
  let signatureValid: boolean;
  try {
    signatureValid = await verifySignature(
      await getPublicKeyFromAddress(payer),
      payerSignature,
      transaction.messageBytes,
    );
  } catch {
    signatureValid = false;
  }
  if (!signatureValid) return fail('invalid_signature', `the signature of ${payer} does not verify`);

  return ok({
    transaction,
    feePayer,
    payer,
    source: parsed.accounts.source.address,
    destination,
    amount,
    blockhash,
    payerSignature: getBase58Decoder().decode(payerSignature),
  });
}
