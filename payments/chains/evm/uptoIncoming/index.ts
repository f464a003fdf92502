/**
 * Being paid by upto on EVM networks, as the family offers it to the flows (../../uptoIncoming.ts):
 * our offer, the verification of a client's permit, its settlement for the amount we choose, and
 * the reads a job following one needs.
 */
import type { UptoIncoming } from '../../uptoIncoming';
import { uptoOffer } from './offer';
import { checkUptoPaymentSignature } from './payload';
import { readUptoSettlement, settleUptoPayment } from './settle';
import { storedUptoPayment, verifyUptoPayment } from './verify';

export const EVM_UPTO_INCOMING: UptoIncoming = {
  offer: uptoOffer,
  checkSignature: checkUptoPaymentSignature,
  verify: (deps, payment, offer) => verifyUptoPayment(deps, payment, offer),
  stored: storedUptoPayment,
  settle: settleUptoPayment,
  read: readUptoSettlement,
};
