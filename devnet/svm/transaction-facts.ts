// What a node tells of a transaction from its bytes alone, without a ledger: its signature (the fee
// payer's) and the fee its message costs.
import {
  getBase58Decoder,
  getCompiledTransactionMessageDecoder,
  type ReadonlyUint8Array,
  type Transaction,
} from '@solana/kit';
import { COMPUTE_BUDGET_PROGRAM_ADDRESS } from '@solana-program/compute-budget';

export const LAMPORTS_PER_SIGNATURE = 5_000n;
const DEFAULT_COMPUTE_UNITS_PER_INSTRUCTION = 200_000n;

export function signatureOf(transaction: Transaction): string {
  const [firstSignature] = Object.values(transaction.signatures);
  return getBase58Decoder().decode(firstSignature ?? new Uint8Array(64));
}

/** Base fee per signature plus the priority fee the compute budget instructions ask for. */
export function feeOfMessage(messageBytes: ReadonlyUint8Array): bigint {
  const message = getCompiledTransactionMessageDecoder().decode(messageBytes);
  const baseFee = BigInt(message.header.numSignerAccounts) * LAMPORTS_PER_SIGNATURE;
  if (!('instructions' in message)) return baseFee;
  let unitLimit: bigint | undefined;
  let microLamportsPerUnit = 0n;
  let otherInstructions = 0n;
  for (const instruction of message.instructions) {
    const data = instruction.data ?? new Uint8Array();
    const isComputeBudget = message.staticAccounts[instruction.programAddressIndex] === COMPUTE_BUDGET_PROGRAM_ADDRESS;
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    if (isComputeBudget && data[0] === 2 && data.length >= 5) unitLimit = BigInt(view.getUint32(1, true));
    else if (isComputeBudget && data[0] === 3 && data.length >= 9) microLamportsPerUnit = view.getBigUint64(1, true);
    else if (!isComputeBudget) otherInstructions += 1n;
  }
  const units = unitLimit ?? otherInstructions * DEFAULT_COMPUTE_UNITS_PER_INSTRUCTION;
  const priorityFee = (microLamportsPerUnit * units + 999_999n) / 1_000_000n;
  return baseFee + priorityFee;
}
