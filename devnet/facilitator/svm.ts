// Verification and settlement of Solana exact payments, through each cluster's JSON-RPC endpoint as
// a remote facilitator would do it. The transaction must have the shape of docs/architecture.md section 4:
// a legacy or v0 message (v0 without lookup tables) paid for by our fee payer, SetComputeUnitLimit,
// SetComputeUnitPrice (small), then one TransferChecked of exactly the amount, 6 decimals, into the
// payTo's associated USDC account, and at most one Memo before or after it (x402's client adds
// one); the fee payer takes part in no instruction, and a Memo is signed by the payer or no one.
// Then we co-sign, simulate, submit and poll (bounded).
import {
  createSolanaRpc,
  decompileTransactionMessage,
  getBase64EncodedWireTransaction,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  partiallySignTransaction,
  type Address,
  type Instruction,
  type KeyPairSigner,
  type Transaction,
} from '@solana/kit';
import {
  ComputeBudgetInstruction,
  parseSetComputeUnitLimitInstruction,
  parseSetComputeUnitPriceInstruction,
} from '@solana-program/compute-budget';
import { findAssociatedTokenPda, parseTransferCheckedInstruction, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import { isComputeBudget, isMemo, isTransferChecked } from '../../payments/chains/solana/shape';
import type { KeyedQueue } from '../key-queue.js';
import { required } from '../required.js';
import { checkVersionSchemeAndNetwork, InvalidPayment } from './invalid.js';
import { SOLANA_NETWORKS, USDC_DECIMALS, type SolanaNetworkName } from '../networks.js';
import {
  type ExactSvmPayload,
  type PaymentPayload,
  type PaymentRequirements,
  type SettleResponse,
  type VerifyResponse,
} from '../x402.js';

/** x402's own ceiling for the compute unit price (5 lamports per unit). */
export const MAX_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS = 5_000_000n;
export const MAX_COMPUTE_UNIT_LIMIT = 1_400_000;
export const CONFIRMATION_TIMEOUT_MS = 15_000;
const CONFIRMATION_POLL_MS = 20;

interface CheckedTransaction {
  network: SolanaNetworkName;
  transaction: Transaction;
  payer: Address;
  source: Address;
  payToAccount: Address;
  amount: bigint;
}

export interface SvmFacilitator {
  feePayer: Address;
  verify(payment: PaymentPayload, requirements: PaymentRequirements): Promise<VerifyResponse>;
  settle(payment: PaymentPayload, requirements: PaymentRequirements): Promise<SettleResponse>;
}

export function createSvmFacilitator(
  rpcUrls: ReadonlyMap<SolanaNetworkName, string>,
  feePayer: KeyPairSigner,
  queue: KeyedQueue,
): SvmFacilitator {
  const rpcs = new Map([...rpcUrls].map(([network, url]) => [network, createSolanaRpc(url)] as const));
  const context: SvmContext = { rpcs, feePayer, queue };
  return {
    feePayer: feePayer.address,
    verify: (payment, requirements) => verify(context, payment, requirements),
    settle: (payment, requirements) => settle(context, payment, requirements),
  };
}

interface SvmContext {
  rpcs: ReadonlyMap<SolanaNetworkName, ReturnType<typeof createSolanaRpc>>;
  feePayer: KeyPairSigner;
  queue: KeyedQueue;
}

/** Checks the transaction and asks the cluster, without sending anything. */
async function verify(
  context: SvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): Promise<VerifyResponse> {
  try {
    const checked = await checkShape(context, payment, requirements);
    await checkWithCluster(context, checked);
    return { isValid: true, payer: checked.payer };
  } catch (error) {
    if (error instanceof InvalidPayment) return { isValid: false, invalidReason: error.reason, payer: error.payer };
    throw error;
  }
}

/** Checks, co-signs and submits the transaction, then polls for its confirmation (bounded). */
async function settle(
  context: SvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): Promise<SettleResponse> {
  const failure = (errorReason: string, payer?: string, transaction = ''): SettleResponse => ({
    success: false,
    errorReason,
    transaction,
    network: payment.network,
    payer,
  });
  let checked: CheckedTransaction;
  try {
    checked = await checkShape(context, payment, requirements);
  } catch (error) {
    if (error instanceof InvalidPayment) return failure(error.reason, error.payer);
    throw error;
  }
  const { rpcs, feePayer, queue } = context;
  const rpc = required(rpcs.get(checked.network), `the RPC of ${checked.network}`);
  return queue.run(`${checked.network}:${feePayer.address}`, async () => {
    let signed: Transaction;
    try {
      signed = await checkWithCluster(context, checked);
    } catch (error) {
      if (error instanceof InvalidPayment) return failure(error.reason, error.payer);
      throw error;
    }
    const signature = await rpc.sendTransaction(getBase64EncodedWireTransaction(signed), { encoding: 'base64' }).send();
    const deadline = Date.now() + CONFIRMATION_TIMEOUT_MS;
    while (Date.now() < deadline) {
      const { value: statuses } = await rpc.getSignatureStatuses([signature]).send();
      const status = statuses[0];
      if (status && (status.confirmationStatus === 'confirmed' || status.confirmationStatus === 'finalized')) {
        if (status.err !== null) return failure('invalid_transaction_state', checked.payer, signature);
        return { success: true, transaction: signature, network: payment.network, payer: checked.payer };
      }
      await new Promise((resolve) => setTimeout(resolve, CONFIRMATION_POLL_MS));
    }
    return failure('settle_exact_svm_transaction_confirmation_timed_out', checked.payer, signature);
  });
}

async function checkShape(
  { rpcs, feePayer }: SvmContext,
  payment: PaymentPayload,
  requirements: PaymentRequirements,
): Promise<CheckedTransaction> {
  checkVersionSchemeAndNetwork(payment, requirements);
  if (!rpcs.has(requirements.network as SolanaNetworkName)) throw new InvalidPayment('invalid_network');
  const network = requirements.network as SolanaNetworkName;
  const mint = SOLANA_NETWORKS[network].usdc as Address;
  if (requirements.asset !== mint || requirements.extra?.feePayer !== feePayer.address) {
    throw new InvalidPayment('invalid_payment_requirements');
  }

  let transaction: Transaction;
  let instructions: readonly Instruction[];
  try {
    const wire = (payment.payload as Partial<ExactSvmPayload> | undefined)?.transaction;
    transaction = getTransactionDecoder().decode(getBase64Encoder().encode(String(wire)));
    const compiled = getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
    if (compiled.version !== 'legacy' && compiled.version !== 0) throw new Error('neither a legacy nor a v0 message');
    if (compiled.version === 0 && (compiled.addressTableLookups?.length ?? 0) > 0)
      throw new Error('a v0 message with lookup tables');
    if (compiled.staticAccounts[0] !== feePayer.address)
      throw new InvalidPayment('invalid_exact_svm_payload_transaction_fee_payer_mismatch');
    instructions = decompileTransactionMessage(compiled).instructions;
  } catch (error) {
    if (error instanceof InvalidPayment) throw error;
    throw new InvalidPayment('invalid_exact_svm_payload_transaction');
  }

  if (instructions.length !== 3 && instructions.length !== 4)
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_length');
  const [limit, price, ...rest] = instructions as [Instruction, Instruction, ...Instruction[]];
  checkComputeBudget(limit, price);
  const memos = rest.filter(isMemo);
  const transfers = rest.filter((instruction) => !isMemo(instruction));
  if (memos.length > 1) throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_duplicate_memo');
  const transfer = transfers[0];
  if (!transfer) throw new InvalidPayment('invalid_exact_svm_payload_no_transfer_instruction');
  // Four instructions are allowed only when one is a Memo.
  if (transfers.length > 1) throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_length');
  if (
    instructions.some((instruction) => instruction.accounts?.some((account) => account.address === feePayer.address))
  ) {
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts');
  }
  if (!isTransferChecked(transfer)) {
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instruction_not_spl_token_transfer_checked');
  }
  const parsed = parseTransferCheckedInstruction(transfer as Parameters<typeof parseTransferCheckedInstruction>[0]);
  const payer = parsed.accounts.authority.address;
  const fail = (reason: string) => new InvalidPayment(reason, payer);
  if (parsed.accounts.mint.address !== mint) throw fail('invalid_exact_svm_payload_transaction_mint_mismatch');
  if (parsed.data.decimals !== USDC_DECIMALS) throw fail('invalid_exact_svm_payload_transaction_decimals_mismatch');
  if (parsed.data.amount !== BigInt(requirements.maxAmountRequired))
    throw fail('invalid_exact_svm_payload_transaction_amount_mismatch');
  const [payToAccount] = await findAssociatedTokenPda({
    mint,
    owner: requirements.payTo as Address,
    tokenProgram: TOKEN_PROGRAM_ADDRESS,
  });
  if (parsed.accounts.destination.address !== payToAccount)
    throw fail('invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata');
  // A Memo's accounts must sign it: anyone but the payer would be a third signer.
  if (memos[0]?.accounts?.some((account) => account.address !== payer))
    throw fail('invalid_exact_svm_payload_transaction_memo_signer');

  const unsigned = Object.entries(transaction.signatures)
    .filter(([, signature]) => signature === null)
    .map(([address]) => address);
  if (unsigned.length !== 1 || unsigned[0] !== feePayer.address)
    throw fail('invalid_exact_svm_payload_transaction_signatures');
  return {
    network,
    transaction,
    payer,
    source: parsed.accounts.source.address,
    payToAccount,
    amount: parsed.data.amount,
  };
}

/** Co-signs and asks the cluster: accounts, balance, not yet processed, simulation with signature checks. */
async function checkWithCluster({ rpcs, feePayer }: SvmContext, checked: CheckedTransaction): Promise<Transaction> {
  const rpc = required(rpcs.get(checked.network), `the RPC of ${checked.network}`);
  const fail = (reason: string) => new InvalidPayment(reason, checked.payer);
  const { value: accounts } = await rpc
    .getMultipleAccounts([checked.source, checked.payToAccount], { encoding: 'base64' })
    .send();
  if (!accounts[0]) throw fail('invalid_exact_svm_payload_transaction_sender_ata_not_found');
  if (!accounts[1]) throw fail('invalid_exact_svm_payload_transaction_receiver_ata_not_found');
  const { value: balance } = await rpc.getTokenAccountBalance(checked.source).send();
  if (BigInt(balance.amount) < checked.amount) throw fail('insufficient_funds');

  const signed = await partiallySignTransaction([feePayer.keyPair], checked.transaction);
  const { value: statuses } = await rpc.getSignatureStatuses([getSignatureFromTransaction(signed)]).send();
  if (statuses[0] !== null) throw fail('duplicate_settlement');
  const { value: simulation } = await rpc
    .simulateTransaction(getBase64EncodedWireTransaction(signed), {
      encoding: 'base64',
      sigVerify: true,
      commitment: 'confirmed',
    })
    .send();
  if (simulation.err !== null) throw fail('invalid_exact_svm_payload_transaction_simulation_failed');
  return signed;
}

function checkComputeBudget(limit: Instruction, price: Instruction): void {
  if (!isComputeBudget(limit, ComputeBudgetInstruction.SetComputeUnitLimit)) {
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction');
  }
  if (!isComputeBudget(price, ComputeBudgetInstruction.SetComputeUnitPrice)) {
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_compute_price_instruction');
  }
  const units = parseSetComputeUnitLimitInstruction(limit as Parameters<typeof parseSetComputeUnitLimitInstruction>[0])
    .data.units;
  if (units > MAX_COMPUTE_UNIT_LIMIT)
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction');
  const { microLamports } = parseSetComputeUnitPriceInstruction(
    price as Parameters<typeof parseSetComputeUnitPriceInstruction>[0],
  ).data;
  if (microLamports > MAX_COMPUTE_UNIT_PRICE_MICRO_LAMPORTS) {
    throw new InvalidPayment('invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high');
  }
}
