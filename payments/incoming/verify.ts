/**
 * verifyClientPayment: an X-PAYMENT checked strictly against the requirements of the 402 we sent
 * for this request (payTo = our wallet, asset = USDC there, maxAmountRequired = our price). The
 * payment's network must be one we offered (Solana aliases resolved); then the checks of its chain
 * type (evm.ts, svm.ts). Nothing is recorded or settled here.
 */
import { canonicalNetwork, NETWORK_TABLE } from '../networkTable';
import { decodePaymentHeader, type PaymentHeaderFailureReason } from '../x402/headers';
import { type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../result';
import { verifyEvmPayment } from './evm';
import { verifySolanaPayment } from './svm';
import type { Deps } from '../deps';
import type { VerifiedClientPayment, VerifyFailureReason } from './types';

const DECODE_REASONS: Record<PaymentHeaderFailureReason, VerifyFailureReason> = {
  invalid_header: 'invalid_header',
  invalid_json: 'invalid_header',
  invalid_payload: 'invalid_header',
  unsupported_x402_version: 'unsupported_version',
  unsupported_scheme: 'invalid_scheme',
  unknown_network: 'network_not_offered',
};

export async function verifyClientPayment(
  header: unknown,
  offered: readonly PaymentRequirements[],
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  const decoded = decodePaymentHeader(header);
  if (!decoded.ok) return fail(DECODE_REASONS[decoded.reason], decoded.details);
  return verifyPayment(decoded.value, offered, deps);
}

/** The same checks for a payment already decoded; `minValiditySeconds` is lower right before settling. */
export async function verifyPayment(
  payment: PaymentPayload,
  offered: readonly PaymentRequirements[],
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
  options: { minValiditySeconds?: number } = {},
): Promise<Result<VerifiedClientPayment, VerifyFailureReason>> {
  if (payment.scheme !== 'exact') return fail('invalid_scheme', `scheme "${String(payment.scheme)}" is not exact`);
  const network = canonicalNetwork(payment.network);
  const requirements =
    network === undefined ? undefined : offered.find((entry) => canonicalNetwork(entry.network) === network);
  if (network === undefined || requirements === undefined) {
    return fail('network_not_offered', `we did not ask to be paid on ${payment.network.slice(0, 64)}`);
  }
  if (requirements.scheme !== 'exact')
    return fail('invalid_offer', `the offered scheme "${requirements.scheme}" is not exact`);
  if (NETWORK_TABLE[network].chainType === 'evm') {
    return verifyEvmPayment(payment, requirements, network, deps, options.minValiditySeconds);
  }
  const verified = await verifySolanaPayment(payment, requirements, network, deps);
  if (!verified.ok) return verified;
  const { inspected: _inspected, coSigned: _coSigned, ...publicPart } = verified.value;
  return ok(publicPart);
}
