/**
 * What every chain family answers in: a client's payment as verified, the reasons one is refused,
 * and the parts of the service's dependencies (Deps) the chain code uses. Here, not in
 * payments/deps.ts, so that the chain code and Deps do not import each other.
 */
import type { Clock } from '../basics/clock';
import type { ChainType, NetworkClass, NetworkName } from '../basics/networkTable';
import type { PaymentBounds } from '../basics/paymentBounds';
import type { PaymentPayload, PaymentRequirements, SignedPaymentPayload } from '../x402/types';
import type { NetworkSettings } from '../basics/config';
import type { Result } from '../basics/result';
import type { PaymentChoice } from '../x402/choose';
import type { SubmissionQueue } from './submissions';

export interface ChainNetwork {
  name: NetworkName;
  chainType: ChainType;
  networkClass: NetworkClass;
  chainId: number | undefined;
  usdc: string;
  rpcUrl: string;
  /** Our wallet's address here; undefined when the key of this chain type is not configured. */
  serviceAddress: string | undefined;
}

/**
 * Our wallet on each family's networks, one member per family: each family's folder adds its own
 * (`evm` in evm/index.ts, `svm` in solana/index.ts) by declaration merging, so that these shared
 * types name no family and a family imports only them; the registry (index.ts, registry.ts) is the
 * one module that imports the families.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface FamilyWallets {}

/** Why our payment to a target could not be signed, one member per family, added like FamilyWallets. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface FamilySigningFailures {}

export interface Chains extends FamilyWallets {
  networks: readonly ChainNetwork[];
  /** The enabled network a name refers to (aliases accepted), or undefined. */
  network(name: string): ChainNetwork | undefined;
  /** Enabled networks where we hold a key: what the requirement choice may pick from. */
  payingNetworks(): NetworkSettings[];
  /**
   * The X-PAYMENT for a chosen requirement: an EIP-3009 signature or a partially signed Solana
   * transaction. `nonce` (EVM only) is the authorization nonce to sign with, when recorded first.
   */
  createPayment(
    choice: PaymentChoice,
    options: { now: Date; nonce?: `0x${string}` },
  ): Promise<Result<PreparedPayment, FamilySigningFailures[keyof FamilySigningFailures]>>;
  close(): Promise<void>;
}

/** Our payment to a target, signed: the header and what the chain is read for afterwards. */
export interface PreparedPayment {
  network: NetworkName;
  payment: SignedPaymentPayload;
  header: string;
  payer: string;
  /** EVM: the authorization nonce, the idempotency key of this payment. Solana: our signature. */
  reference: string;
  /** EVM: validBefore (unix seconds). Solana: the last block height at which the transaction can land. */
  expiresAt: { unixSeconds: bigint } | { blockHeight: bigint };
}

/** The part of Deps the chain code reads: our chains, the clock, the bounds of each wait, the submission queue. */
export interface ChainDeps {
  chains: Chains;
  clock: Clock;
  paymentBounds: PaymentBounds;
  submissions: SubmissionQueue;
}

/** Why an X-PAYMENT is refused. Everything but rpc_unavailable is the client's doing (a 400 or 402). */
export type VerifyFailureReason =
  | 'invalid_header'
  | 'unsupported_version'
  | 'invalid_scheme'
  | 'network_not_offered'
  /** A version 2 payment whose `accepted` is none of the entries we offered. */
  | 'offer_mismatch'
  /** The requirement we offered is not one we can be paid with (our configuration, not the client). */
  | 'invalid_offer'
  | 'wrong_recipient'
  | 'wrong_amount'
  | 'wrong_asset'
  | 'expired'
  | 'not_yet_valid'
  | 'invalid_signature'
  | 'nonce_already_used'
  | 'insufficient_funds'
  | 'invalid_transaction'
  | 'wrong_fee_payer'
  | 'fee_payer_in_instruction'
  | 'compute_budget_too_high'
  | 'simulation_failed'
  /** A chain read failed or timed out: nothing is known about the payment; try again later. */
  | 'rpc_unavailable';

/** The replay guard of a payment: unique per (network, asset, nonceKey) in relay_transactions. */
export interface IdempotencyKey {
  network: NetworkName;
  asset: string;
  /** EVM: the authorization nonce (lowercase hex). Solana: the payer's signature of the transaction (base58). */
  nonceKey: string;
}

export interface VerifiedClientPayment {
  network: NetworkName;
  chainType: ChainType;
  /** EVM: authorization.from (checksummed). Solana: the transfer authority. */
  payer: string;
  payTo: string;
  asset: string;
  amountMicroUsdc: bigint;
  idempotencyKey: IdempotencyKey;
  /** The X-PAYMENT as decoded (its network name as the client wrote it). */
  payment: PaymentPayload;
  /** The entry of our 402 it matched. */
  requirements: PaymentRequirements;
  /** EVM: validBefore in unix seconds; the authorization cannot be settled from then on. */
  validBefore?: bigint;
}

export function unixSeconds(clock: Clock): bigint {
  return BigInt(Math.floor(clock.now().getTime() / 1000));
}

/** Why a client's payment was not settled. */
export type SettleFailureReason =
  | VerifyFailureReason
  | 'not_found'
  | 'no_wallet'
  | 'network_not_enabled'
  | 'submission_queue_full'
  | 'facilitator_refused'
  | 'broadcast_refused'
  | 'transaction_reverted'
  | 'transaction_failed'
  | 'authorization_canceled'
  /** upto: the permit's spender is not x402UptoPermit2Proxy. */
  | 'wrong_spender'
  /** upto: the permit lets another facilitator than our wallet settle it. */
  | 'wrong_facilitator'
  /** upto: the payer has not allowed Permit2 to move the token (an approve, once per token). */
  | 'permit2_allowance_missing';

/** Why a refund was not made. */
export type RefundFailureReason =
  | 'not_found'
  | 'not_refundable'
  | 'no_wallet'
  | 'network_not_enabled'
  | 'destination_account_missing'
  | 'insufficient_funds'
  | 'simulation_failed'
  | 'rpc_unavailable'
  | 'submission_queue_full'
  | 'broadcast_refused'
  | 'transaction_reverted'
  | 'transaction_failed'
  | 'not_sent';

/** What was recorded about one payment of ours to a target before it was sent. */
export interface SignedTargetPayment {
  /** Names the payment in messages (its row). */
  label: string;
  network: string;
  /** Our wallet's address on that chain. */
  payer: string | null;
  /** EVM: the authorization nonce. */
  nonce: string | null;
  /** Solana: our signature in the transaction. */
  payerSignature: string | null;
  /** EVM: validBefore, unix seconds. */
  validBefore: bigint | null;
  /** Solana: the last block height at which the transaction can land. */
  lastValidBlockHeight: bigint | null;
  /** A transaction the target reported or we found earlier. */
  txHash: string | null;
  /**
   * The payment as signed, where it was kept: the family reads from it what the payment allows
   * (an upto permit's maximum and recipient, whose settled amount the reading then reports).
   */
  payload?: unknown;
}

export type ChainReading =
  /**
   * On chain: the transfer happened. `amount`: what moved to the payee, in the asset's atomic
   * units, read from the chain; always given for a payment that may settle less than it allows (upto).
   */
  | { state: 'settled'; txHash?: string; amount?: bigint; details: string }
  /** Never settled, and can no longer be. */
  | { state: 'expired'; details: string }
  /** Not settled yet, but may still be. `expiresAt`: when the payment stops being usable by the wall clock, where known. */
  | { state: 'open'; details: string; expiresAt?: Date }
  /** The chain could not be read; try again later. */
  | { state: 'unknown'; details: string };
