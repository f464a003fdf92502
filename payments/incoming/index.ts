/**
 * Payments we receive (/relay and paid chat): verify a client's X-PAYMENT (version 1) or
 * PAYMENT-SIGNATURE (version 2) against the 402 we sent,
 * record it (the replay guard), settle it (facilitator or direct), reconcile what was left
 * pending, refund it, and finish what a request left open (followUp.ts). The /relay flow
 * (payments/relay/: quote, admission, the call, its outcome and jobs) and paid chat build on these.
 *
 *   relayRequirements(chains, network, options)        one entry of our 402
 *   verifyClientPayment(header, offered, deps)          Result<VerifiedClientPayment, VerifyFailureReason>
 *   recordClientPayment(db, verified, request)          Result<RelayTransaction, 'nonce_already_used'>
 *   settleClientPayment(db, relayTxId, deps)            SettlementOutcome
 *   reconcileSettlement(db, relayTxId, deps)            SettlementOutcome
 *   refundClientPayment(db, relayTxId, deps)            RefundOutcome
 *   reconcileRefund(db, refundId, deps)                 RefundOutcome
 */
export * from './types';
export { IN_PROCESS_ONLY, SubmissionQueue, SubmissionQueueFull, MAX_QUEUED_PER_KEY } from '../chains/submissions';
export {
  offers,
  relayRequirements,
  DEFAULT_RELAY_TIMEOUT_SECONDS,
  type OfferOptions,
  type OffersRequest,
} from './offer';
export { verifyClientPayment, verifyClientPaymentHeader, verifyDecodedPayment, verifyPayment } from './verify';
export {
  decodeClientPayment,
  paymentForOffers,
  paymentHeaderName,
  type ClientPaymentHeader,
  type DecodedClientPayment,
} from './clientPayment';
export {
  recordClientPayment,
  findRelayTransaction,
  recordTargetPayment,
  markDelivered,
  unfinishedSettlements,
  liveRefund,
  pendingRefunds,
  type RelayTransaction,
  type RelayRequest,
  type Refund,
} from './store';
export {
  settleClientPayment,
  reconcileSettlement,
  settlementOutcomeOf,
  type SettlementOutcome,
  type SettleFailureReason,
} from './settle';
export {
  refundClientPayment,
  reconcileRefund,
  UNSENT_REFUND_STALE_MS,
  type RefundOutcome,
  type RefundFailureReason,
} from './refund';
