/**
 * verifyClientPaymentHeader: an X-PAYMENT or a PAYMENT-SIGNATURE checked strictly against the requirements of the 402 we sent
 * for this request (payTo = our wallet, asset = USDC there, maxAmountRequired = our price). The
 * payment's network must be one we offered (Solana aliases resolved); then the checks of the family
 * of its network (payments/chains/registry.ts). Nothing is recorded or settled here.
 */
import { familyOf } from '../chains/registry';
import { canonicalNetwork } from '../basics/networkTable';
import { type PaymentHeaderFailureReason } from '../x402/headers';
import { type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, type Result } from '../basics/result';
import type { Deps } from '../deps';
import type { VerifiedClientPayment, VerifyFailureReason } from './types';
import {
  decodeClientPayment,
  paymentForOffers,
  type ClientPaymentHeader,
  type DecodedClientPayment,
} from './clientPayment';

const DECODE_REASONS: Record<PaymentHeaderFailureReason, VerifyFailureReason> = {
  invalid_header: 'invalid_header',
  invalid_json: 'invalid_header',
  invalid_payload: 'invalid_header',
  unsupported_x402_version: 'unsupported_version',
  unsupported_scheme: 'invalid_scheme',
  unknown_network: 'network_not_offered',
};

/** X-PAYMENT or PAYMENT-SIGNATURE, decoded strictly and checked against our offers. */
export async function verifyClientPaymentHeader(
  header: ClientPaymentHeader,
  offered: readonly PaymentRequirements[],
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  const decoded = decodeClientPayment(header);
  if (!decoded.ok) return fail(DECODE_REASONS[decoded.reason], decoded.details);
  return verifyDecodedPayment(decoded.value, offered, deps);
}

/** A payment already decoded (either version), checked against our offers: a version 2 one by its `accepted`. */
export async function verifyDecodedPayment(
  decoded: DecodedClientPayment,
  offered: readonly PaymentRequirements[],
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  const matched = paymentForOffers(decoded, offered);
  if (!matched.ok) return matched;
  return verifyPayment(matched.value.payment, matched.value.offered, deps);
}

/**
 * The same checks for a payment already decoded. Right before settling a stored payment,
 * `minValiditySeconds` is lower and `signatureVerified` says its EVM signature was verified when it
 * was admitted: the signature of the same bytes is not recovered twice (the chain checks it again
 * anyway, in the dry run of the transfer that every verification makes).
 */
export async function verifyPayment(
  payment: PaymentPayload,
  offered: readonly PaymentRequirements[],
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
  options: { minValiditySeconds?: number; signatureVerified?: boolean } = {},
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  // A stored payment (reverify before settling) is database JSON read back as a PaymentPayload: the
  // scheme is checked again here, whatever the type says.
  const scheme: string = payment.scheme;
  if (scheme !== 'exact') return fail('invalid_scheme', `scheme "${scheme}" is not exact`);
  const network = canonicalNetwork(payment.network);
  const requirements =
    network === undefined ? undefined : offered.find((entry) => canonicalNetwork(entry.network) === network);
  if (network === undefined || requirements === undefined) {
    return fail('network_not_offered', `we did not ask to be paid on ${payment.network.slice(0, 64)}`);
  }
  if (requirements.scheme !== 'exact')
    return fail('invalid_offer', `the offered scheme "${requirements.scheme}" is not exact`);
  return familyOf(network).verifyPayment(payment, requirements, network, deps, options);
}
