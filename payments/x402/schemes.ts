/**
 * The wire side of a payment scheme on a chain family, as x402 sees it: the payload a payment in
 * it carries, and the scheme's own checks of a requirement we might pay. Defined here, implemented
 * by each family (payments/chains/evm/exact.ts, payments/chains/solana/exact.ts) and looked up in
 * the registry (payments/chains/registry.ts), as @x402/core's `register(network, scheme)` does:
 * the functions of x402/ that need a scheme are given the lookup, and never branch on a family.
 */
import type { NetworkName, TransferMethod } from '../basics/networkTable';
import type { Result } from '../basics/result';
import type { ExactEvmPayload, ExactSvmPayload, PaymentRequirements, UptoPermit2Payload } from './types';

/** A payload as a scheme's wire check returns it. */
export type SchemePayload = ExactEvmPayload | ExactSvmPayload | UptoPermit2Payload;

/** The payload of an exact payment (what clients pay us with). */
export type ExactSchemePayload = ExactEvmPayload | ExactSvmPayload;

/** Whether a checked payload is of the exact scheme (as the registry recognizes it), not an upto permit. */
export function isExactPayload(payload: SchemePayload, schemes: SchemeLookup): payload is ExactSchemePayload {
  return schemes.schemeOfPayload(payload)?.scheme === 'exact';
}

/** Why a requirement's payTo or extra cannot be paid in a scheme. */
export type RecipientProblemReason =
  | 'invalid_pay_to'
  | 'missing_fee_payer'
  | 'invalid_fee_payer'
  /** upto: the offer names no facilitator allowed to settle it, or not as an address. */
  | 'missing_facilitator'
  | 'invalid_facilitator'
  /** batch-settlement: the offer's receiver authorizer, withdraw delay or token domain is missing or out of bounds. */
  | 'invalid_channel_terms';

export interface PaymentScheme {
  /** The scheme's name on the wire ("exact", "upto"). */
  readonly scheme: string;
  /**
   * The transfer method of an offer that names none in `extra.assetTransferMethod`: undefined, its
   * network's own (exact); "permit2" for upto, which moves its asset only through Permit2.
   */
  readonly defaultTransferMethod?: TransferMethod;
  /**
   * How the asset moves in the payments we sign and accept in this scheme: an offer whose network
   * (or whose `extra.assetTransferMethod`) asks for another method is refused by name.
   */
  readonly transferMethods: readonly TransferMethod[];
  /** The payload of a payment in this scheme, checked field by field (it is untrusted). */
  checkPayload(payload: unknown): Result<SchemePayload, 'invalid_payload'>;
  /** Whether a requirement's asset is the one configured for its network (as the family compares addresses). */
  sameAsset(asset: string, configured: string): boolean;
  /** Whether a payload (already decoded and checked) is of this scheme's shape. */
  recognizes(payload: SchemePayload): boolean;
  /**
   * What names a payment for replay and idempotency: its payer when the payload says it (an EVM
   * authorization's from, lowercase), and the payment itself (the authorization's nonce, or a hash
   * of a Solana transaction).
   */
  replayIdentity(payload: SchemePayload): { payer: string | undefined; payment: string };
  /** What is wrong with a requirement's payTo and extra for this scheme, or undefined. */
  recipientProblem(requirements: PaymentRequirements): { reason: RecipientProblemReason; details: string } | undefined;
}

/** Finds the scheme registered for a network (by its CAIP-2 id) and a scheme name. */
export interface SchemeLookup {
  scheme(network: NetworkName, scheme: string): PaymentScheme | undefined;
  /** The scheme whose payloads have this one's shape. */
  schemeOfPayload(payload: SchemePayload): PaymentScheme | undefined;
}
