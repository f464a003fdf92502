// litesvm reports errors as native objects and const enums that do not exist at run time; a
// Solana node reports them as JSON (TransactionError's serde form). The names below follow the
// declaration order of litesvm 1.5.0's internal.d.ts, which is the numeric value of each variant.
import { FailedTransactionMetadata } from 'litesvm';

const TRANSACTION_ERRORS = (
  'AccountInUse AccountLoadedTwice AccountNotFound ProgramAccountNotFound InsufficientFundsForFee ' +
  'InvalidAccountForFee AlreadyProcessed BlockhashNotFound CallChainTooDeep MissingSignatureForFee ' +
  'InvalidAccountIndex SignatureFailure InvalidProgramForExecution SanitizeFailure ClusterMaintenance ' +
  'AccountBorrowOutstanding WouldExceedMaxBlockCostLimit UnsupportedVersion InvalidWritableAccount ' +
  'WouldExceedMaxAccountCostLimit WouldExceedAccountDataBlockLimit TooManyAccountLocks ' +
  'AddressLookupTableNotFound InvalidAddressLookupTableOwner InvalidAddressLookupTableData ' +
  'InvalidAddressLookupTableIndex InvalidRentPayingAccount WouldExceedMaxVoteCostLimit ' +
  'WouldExceedAccountDataTotalLimit MaxLoadedAccountsDataSizeExceeded ResanitizationNeeded ' +
  'InvalidLoadedAccountsDataSizeLimit UnbalancedTransaction ProgramCacheHitMaxLimit CommitCancelled'
).split(' ');

const INSTRUCTION_ERRORS = (
  'GenericError InvalidArgument InvalidInstructionData InvalidAccountData AccountDataTooSmall ' +
  'InsufficientFunds IncorrectProgramId MissingRequiredSignature AccountAlreadyInitialized ' +
  'UninitializedAccount UnbalancedInstruction ModifiedProgramId ExternalAccountLamportSpend ' +
  'ExternalAccountDataModified ReadonlyLamportChange ReadonlyDataModified DuplicateAccountIndex ' +
  'ExecutableModified RentEpochModified NotEnoughAccountKeys AccountDataSizeChanged AccountNotExecutable ' +
  'AccountBorrowFailed AccountBorrowOutstanding DuplicateAccountOutOfSync InvalidError ' +
  'ExecutableDataModified ExecutableLamportChange ExecutableAccountNotRentExempt UnsupportedProgramId ' +
  'CallDepth MissingAccount ReentrancyNotAllowed MaxSeedLengthExceeded InvalidSeeds InvalidRealloc ' +
  'ComputationalBudgetExceeded PrivilegeEscalation ProgramEnvironmentSetupFailure ProgramFailedToComplete ' +
  'ProgramFailedToCompile Immutable IncorrectAuthority AccountNotRentExempt InvalidAccountOwner ' +
  'ArithmeticOverflow UnsupportedSysvar IllegalOwner MaxAccountsDataAllocationsExceeded MaxAccountsExceeded ' +
  'MaxInstructionTraceLengthExceeded BuiltinProgramsMustConsumeComputeUnits BorshIoError'
).split(' ');

/** A transaction error as a Solana node serializes it, e.g. "BlockhashNotFound" or {InstructionError: [2, {Custom: 1}]}. */
export type SolanaTransactionError = string | Record<string, unknown>;

function instructionErrorJson(error: unknown): unknown {
  if (typeof error === 'number') return INSTRUCTION_ERRORS[error] ?? `InstructionError${error}`;
  if (error && typeof error === 'object' && 'code' in error) return { Custom: (error as { code: number }).code };
  if (error && typeof error === 'object' && 'msg' in error) return { BorshIoError: (error as { msg: string }).msg };
  return String(error);
}

export function transactionErrorJson(failed: FailedTransactionMetadata): SolanaTransactionError {
  const error: unknown = failed.err();
  if (typeof error === 'number') return TRANSACTION_ERRORS[error] ?? `TransactionError${error}`;
  if (error && typeof error === 'object') {
    const fields = error as { index?: number; accountIndex?: number; err?: () => unknown };
    const variant = error.constructor.name;
    if (variant.endsWith('InstructionError') && fields.err) {
      return { InstructionError: [fields.index, instructionErrorJson(fields.err())] };
    }
    if (variant.endsWith('DuplicateInstruction')) return { DuplicateInstruction: fields.index };
    if (variant.endsWith('InsufficientFundsForRent'))
      return { InsufficientFundsForRent: { account_index: fields.accountIndex } };
    if (variant.endsWith('ProgramExecutionTemporarilyRestricted')) {
      return { ProgramExecutionTemporarilyRestricted: { account_index: fields.accountIndex } };
    }
  }
  return String(error);
}

/**
 * The variants without fields are raised while loading or checking a transaction, before any
 * instruction ran (signature, blockhash, fee payer, duplicate): a node refuses such a transaction
 * at submission and never records it, so it gets no signature status.
 */
export function isRejectedBeforeExecution(error: SolanaTransactionError): boolean {
  return typeof error === 'string';
}

export function isFailure(result: unknown): result is FailedTransactionMetadata {
  return result instanceof FailedTransactionMetadata;
}
