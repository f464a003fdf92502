/**
 * Being paid by upto (x402 version 2): the payer signs a maximum and we settle what the call used.
 * A family that takes such payments names its implementation (ChainFamily.uptoIncoming; EVM:
 * ./evm/uptoIncoming/); the flows ask the registry (uptoIncomingOn, uptoOffers in registry.ts), by network, and never by family.
 */
import type { uptoOffer } from './evm/uptoIncoming/offer';
import type { checkUptoPaymentSignature } from './evm/uptoIncoming/payload';
import type { readUptoSettlement, settleUptoPayment } from './evm/uptoIncoming/settle';
import type { storedUptoPayment, verifyUptoPayment } from './evm/uptoIncoming/verify';

export type { UptoPaymentSignature } from './evm/uptoIncoming/payload';
export type { UptoVerifyFailureReason, VerifiedUptoPayment } from './evm/uptoIncoming/verify';
export type { UptoSettleFailureReason, UptoSettlement, StoreUptoTransaction } from './evm/uptoIncoming/settle';

export interface UptoIncoming {
  offer: typeof uptoOffer;
  checkSignature: typeof checkUptoPaymentSignature;
  verify: (...args: Parameters<typeof verifyUptoPayment>) => ReturnType<typeof verifyUptoPayment>;
  stored: typeof storedUptoPayment;
  settle: typeof settleUptoPayment;
  read: typeof readUptoSettlement;
}
