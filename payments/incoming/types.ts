/**
 * The receiving side of x402 version 1 in relay mode: what a verified client payment is, the
 * failure reasons callers act on, and the bounds of each wait (Deps.relayLimits). No HTTP
 * framework here: the /relay handler calls these functions and shapes responses.
 */
import type { Clock } from '../clock';
import type { ChainType, NetworkName } from '../networkTable';
import type { PaymentPayload, PaymentRequirements } from '../x402/types';
export { DEFAULT_RELAY_LIMITS, type RelayLimits } from '../relayLimits';

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
