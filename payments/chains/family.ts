/**
 * What a chain family does for the flows (docs/architecture.md section 1, "The registry"): one
 * object per family (chains/evm/family.ts, chains/solana/family.ts), found by a network's row in
 * the network table, never by a branch in the flow. The flows own their records; a family is
 * handed a record's facts and the writes it may make (SettlementRecord, RefundRecord) and does the
 * chain's part between them.
 */
import type { UptoIncoming } from './uptoIncoming';
import type { ChainType, FinalityRule, NetworkName } from '../basics/networkTable';
import type { Result } from '../basics/result';
import type { PaymentChoice } from '../x402/choose';
import type { PaymentPayload, PaymentRequirements, SignedPaymentPayload } from '../x402/types';
import type { WalletBalances } from './balances';
import type {
  ChainDeps,
  ChainReading,
  Chains,
  PreparedPayment,
  RefundFailureReason,
  SettleFailureReason,
  SignedTargetPayment,
  VerifiedClientPayment,
  VerifyFailureReason,
} from './types';

/** A client's payment recorded for settling, as the settling flow hands it to the family of its network. */
export interface SettlementRecord<Outcome> {
  id: bigint;
  network: NetworkName;
  asset: string;
  payment: PaymentPayload;
  requirements: PaymentRequirements;
  /** Our or the facilitator's transaction, once known; its signed bytes when we signed it (EVM). */
  txHash: string | null;
  rawTx: string | null;
  /** Whether a facilitator settles it (then, without its answer, we may not know the transaction). */
  viaFacilitator: boolean;
  /** When the payment was recorded: a facilitator can have been handed it, and so landed it, only after. */
  recordedAt: Date;
  /** Every check again, right before the money moves (the signature was verified on admission). */
  reverify(deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds'>): Promise<Result<unknown, VerifyFailureReason>>;
  /** Stores the transaction before it is broadcast; false when the record moved on without us. */
  storeTransaction(signed: { hash: string; raw?: string }): Promise<boolean>;
  /** Stores a transaction signed again in place of `refused`, which can never be mined. */
  replaceTransaction(refused: string, signed: { hash: string; raw: string }): Promise<boolean>;
  settled(txHash: string): Promise<Outcome>;
  failed(reason: SettleFailureReason, details: string): Promise<Outcome>;
  pending(txHash: string | null): Outcome;
  /** What the record says now, for a caller that could not act on it. */
  asRecorded(): Promise<Outcome>;
  /** Reads the chain once for this record (the record read anew). */
  reconcile(): Promise<Outcome>;
}

/** A pending refund, as the refund flow hands it to the family of its network. */
export interface RefundRecord<Outcome> {
  network: NetworkName;
  asset: string;
  recipient: string;
  /** In the asset's atomic units. */
  amount: bigint;
  relayTransactionId: bigint;
  txHash: string | null;
  /** Solana: the blockhash the refund was signed with. */
  blockhash: string | null;
  /** EVM: the signed bytes, to send again. */
  rawTx: string | null;
  /** Pending for long enough that a refund the chain does not know is given up. */
  stale: boolean;
  storeTransaction(hash: string, stored: { blockhash?: string; raw?: string }): Promise<boolean>;
  replaceTransaction(refused: string, signed: { hash: string; raw: string }): Promise<boolean>;
  confirmed(txHash: string): Promise<Outcome>;
  failed(reason: RefundFailureReason, details: string): Promise<Outcome>;
  pending(txHash: string | null): Outcome;
  asRecorded(): Promise<Outcome>;
}

/** What our wallet holds on one network: the stablecoin (its atomic units) and the gas token (wei, lamports). */
export interface WalletHoldings {
  asset: bigint;
  gas: bigint;
}

/** An approval our wallet gives once per network, token and spender (EVM: Permit2 on a stablecoin). */
export interface SpendingApproval {
  network: NetworkName;
  token: string;
  owner: string;
  spender: string;
}

export type { PreparedPayment } from './types';

/**
 * A settled transaction followed to finality (payments/tracking/finality.ts owns the watch): what the family
 * stored to read it and to send it again. `transfer` is the watch's record of the transfer: the
 * x402 payload of an authorization or transaction (a client's, or ours to a target), or a refund's
 * signed bytes, recipient and amount.
 */
export interface WatchedTransfer {
  network: NetworkName;
  txHash: string;
  transfer: {
    payment?: SignedPaymentPayload | null;
    raw?: string | null;
    recipient?: string;
    amount?: string;
    asset?: string;
    blockhash?: string | null;
  };
  /** Records a transaction sent in place of txHash, before its broadcast; false when the watch moved on. */
  storeTransaction(hash: string): Promise<boolean>;
  /**
   * A reading every watch of one look shares (a network's head), read once for all of them. A
   * head read a moment earlier is never newer than the chain's: it can only leave a transfer
   * pending one more look, never call it final early.
   */
  shared?: <T>(key: string, read: () => Promise<T>) => Promise<T>;
}

/** Why a settled transfer can no longer land after the chain dropped it. */
export type LossReason = 'expired' | 'nonce_used_elsewhere' | 'balance_gone' | 'reverted' | 'not_resendable';

/** What the chain says about a watched transfer now. */
export type FinalityReading =
  /** In a block at the network's finality rule. */
  | { state: 'final'; txHash: string; blockNumber: bigint; details: string }
  /**
   * Not final yet: in a shallow block, or sent again (`resent`), or moved to another transaction of
   * the same transfer. `quietMs`, where the family can tell: no look within this much time can
   * change anything, as the block cannot reach the finality rule before, and a reorg dropping the
   * transfer meanwhile could no longer be answered by sending it again (so finding the drop early
   * gains nothing). `sendableUntil` (unix seconds, by the chain's clock), where the transfer could
   * be sent again after a drop: until then a look that finds it dropped sends it again, so looks
   * are timed to fall before it (payments/tracking/finality.ts nextFinalityLook). `held`: the block meets
   * the finality rule, and only that the transfer could still be sent again keeps it pending.
   */
  | {
      state: 'pending';
      txHash: string;
      blockNumber?: bigint;
      resent?: boolean;
      details: string;
      quietMs?: number;
      sendableUntil?: bigint;
      held?: boolean;
    }
  /** Dropped and unable to land again. */
  | { state: 'lost'; reason: LossReason; details: string }
  /** The chain could not be read; look again later. */
  | { state: 'unknown'; details: string };

/** A target's payTo that cannot receive the payment we would make: refused before anything is signed. */
export interface RecipientAccountProblem {
  reason: 'pay_to_account_missing';
  details: string;
}

export interface SigningOptions {
  now: Date;
  /** The authorization nonce recorded beforehand, where the family signs one (EVM). */
  nonce?: `0x${string}`;
}

export type VerifyOptions = { minValiditySeconds?: number; signatureVerified?: boolean };

/**
 * One chain family. Its methods take the service's chains (our clients and wallet on each
 * network) as a dependency: the family object itself holds nothing and is shared (registry.ts).
 */
export interface ChainFamily {
  readonly name: ChainType;
  /**
   * Whether a facilitator that settles a payment to us also pays its fees (Solana: it co-signs as
   * fee payer, so our offer names its fee payer, and is left out when it names none).
   */
  readonly facilitatorPaysFees: boolean;
  /** Being paid by upto on this family's networks, where it takes such payments. */
  readonly uptoIncoming?: UptoIncoming;
  /** Our wallet's address on this family's networks; undefined when its key is not configured. */
  serviceAddress(chains: Pick<Chains, 'evm' | 'svm'>): string | undefined;
  /** The `extra` of our offer: EVM the token's EIP-712 name and version, Solana the fee payer. */
  offerExtra(network: NetworkName, feePayer: string): Record<string, unknown>;
  /** Every check of a client's payment against the entry of our 402 it names. */
  verifyPayment(
    payment: PaymentPayload,
    offered: PaymentRequirements,
    network: NetworkName,
    deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds'>,
    options: VerifyOptions,
  ): Promise<Result<VerifiedClientPayment, VerifyFailureReason>>;
  /**
   * Before a facilitator settles a payment verified a moment ago in the same request: what must
   * still hold (EVM: the time left), or every check again where nothing cheaper is enough.
   */
  recheckBeforeFacilitator<O>(
    record: SettlementRecord<O>,
    deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds'>,
  ): Promise<Result<unknown, VerifyFailureReason>>;
  /** Settles with our wallet: submits, stores the transaction first, waits a bounded time. */
  settleDirectly<O>(
    record: SettlementRecord<O>,
    deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds' | 'submissions'>,
  ): Promise<O>;
  /** A facilitator said it settled in `txHash`: our node's view of it, bounded (undefined: the chain decides). */
  followFacilitatorSettlement<O>(
    record: SettlementRecord<O>,
    txHash: string,
    deps: Pick<ChainDeps, 'chains' | 'paymentBounds'>,
  ): Promise<O | undefined>;
  /** Reads the chain once for a record left settling; concludes when the outcome is certain. */
  reconcileSettlement<O>(record: SettlementRecord<O>, deps: ReconcileDeps): Promise<O>;
  /** Sends a pending refund (signed and stored before its broadcast) and waits a bounded time. */
  sendRefund<O>(refund: RefundRecord<O>, deps: Pick<ChainDeps, 'chains' | 'submissions' | 'paymentBounds'>): Promise<O>;
  /** Reads the chain once for a pending refund that has a transaction. */
  reconcileRefund<O>(refund: RefundRecord<O>, deps: Pick<ChainDeps, 'chains' | 'paymentBounds'>): Promise<O>;
  /**
   * Our wallet's holdings on `network`, read from the chain now: its stablecoin (atomic units of
   * the network's asset) and its gas token (wei, lamports). Undefined when our key for this family
   * is not configured. The float watch (payments/tracking/float.ts) reads every network by it.
   */
  walletHoldings(chains: Chains, network: NetworkName): Promise<Result<WalletHoldings | undefined, string>>;
  /** The family's gas token as messages name it. */
  readonly gasToken: string;
  /** Why our wallet cannot pay `choice` now, where the family reads it before signing. */
  walletShortage(
    deps: { chains: Chains; balances: WalletBalances },
    choice: PaymentChoice,
    nowMs: number,
  ): Promise<{ reason: string; details: string } | undefined>;
  /**
   * A standing approval our wallet must give once before it can pay `choice` (EVM: Permit2's on
   * the token, for a target that asks for Permit2, while our allowance falls short), or undefined.
   */
  spendingApproval(chains: Chains, choice: PaymentChoice): Promise<Result<SpendingApproval | undefined, string>>;
  /** Gives that approval from our wallet (`store` records its transaction before the broadcast) and waits for its receipt. */
  giveApproval(
    approval: SpendingApproval,
    store: (txHash: string) => Promise<boolean>,
    deps: Pick<ChainDeps, 'chains' | 'submissions' | 'paymentBounds'>,
  ): Promise<Result<{ txHash: string; gasUsed: bigint; feeWei: bigint }, string>>;
  /**
   * Why the target's payTo cannot receive `choice` now, read from the chain before anything is
   * signed, or undefined (EVM: a balance needs no account, never). Solana: the payTo has no token
   * account for the mint; x402's clients (@x402/svm, x402) pay into that associated account and
   * never create it, and the facilitators refuse a payment into a missing one. A chain that cannot
   * be read is no answer here (undefined): signing reads it again and fails on its own.
   */
  recipientAccountProblem(chains: Chains, choice: PaymentChoice): Promise<RecipientAccountProblem | undefined>;
  /** Our payment for a target's requirement, signed (not sent). */
  signPayment(chains: Chains, choice: PaymentChoice, options: SigningOptions): Promise<Result<PreparedPayment, string>>;
  /** How a payment's reference (PreparedPayment.reference) is recorded: an authorization nonce or our signature. */
  referenceFields(reference: string | null): Pick<SignedTargetPayment, 'nonce' | 'payerSignature'>;
  /** What the chain says about a payment we signed for a target. */
  readOurPayment(
    chains: Chains,
    network: NetworkName,
    payment: SignedTargetPayment & { payer: string },
    options: { now: Date; reportedTxHash?: string },
  ): Promise<ChainReading>;
  /**
   * Follows a settled transfer to finality: its depth by `rule`, and, when the chain dropped it (a
   * reorg), the same transfer sent again while it can land (an authorization or a signed
   * transaction is used at most once, so sending it again never pays twice).
   */
  followToFinality(
    watch: WatchedTransfer,
    rule: FinalityRule,
    deps: Pick<ChainDeps, 'chains' | 'submissions' | 'paymentBounds'>,
  ): Promise<FinalityReading>;
  /** Resolves when the network's RPC answers within `timeoutMs`; rejects with the reason otherwise. */
  checkReachable(chains: Chains, network: NetworkName, timeoutMs: number): Promise<void>;
  /**
   * Which chain the network's RPC says it serves (EVM: eth_chainId; Solana: the genesis hash),
   * compared with the network's row, within `timeoutMs`; rejects with the reason when it does not answer.
   */
  chainIdentity(chains: Chains, network: NetworkName, timeoutMs: number): Promise<ChainIdentity>;
}

/** The chain an RPC serves: the network's, or another one (`answered` and `expected` read as "chain id 84532"). */
export type ChainIdentity = { kind: 'same' } | { kind: 'other'; answered: string; expected: string };

/**
 * What reconciling uses; with the submission queue and a clock (the jobs have both) it can also
 * sign a lost settlement again when its nonce went to another transaction of ours.
 */
export type ReconcileDeps = Pick<ChainDeps, 'chains' | 'paymentBounds'> &
  Partial<Pick<ChainDeps, 'submissions' | 'clock'>>;
