/**
 * The receiving side of x402 in relay mode: what a verified client payment is and the failure
 * reasons callers act on (defined with the chains, payments/chains/types.ts), and the bounds of
 * each wait (Deps.paymentBounds).
 */
export {
  unixSeconds,
  type IdempotencyKey,
  type VerifiedClientPayment,
  type VerifyFailureReason,
} from '../chains/types';
export { DEFAULT_PAYMENT_BOUNDS, type PaymentBounds } from '../basics/paymentBounds';
