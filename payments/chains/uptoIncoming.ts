/**
 * Being paid by upto (x402 version 2): the payer signs a maximum and we settle what the call used.
 * A family that takes such payments names its implementation (ChainFamily.uptoIncoming; EVM:
 * ./evm/uptoIncoming/); the flows ask here, by network, and never by family.
 */
import { canonicalNetwork, type NetworkName } from '../networkTable';
import type { PaymentRequirementsV2 } from '../x402/v2';
import type { uptoOffer } from './evm/uptoIncoming/offer';
import type { checkUptoPaymentSignature } from './evm/uptoIncoming/payload';
import type { readUptoSettlement, settleUptoPayment } from './evm/uptoIncoming/settle';
import type { storedUptoPayment, verifyUptoPayment } from './evm/uptoIncoming/verify';
import { familyOf } from './registry';

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

/** The upto side of a network's family, if it takes upto payments. */
export function uptoIncomingOn(network: string): UptoIncoming | undefined {
  const name = canonicalNetwork(network);
  return name === undefined ? undefined : familyOf(name).uptoIncoming;
}

/**
 * Our upto entries on these networks (those whose family takes upto), each for at most
 * `maximumMicroUsdc`; a network where no offer can be made is left out.
 */
export function uptoOffers(
  deps: Parameters<typeof uptoOffer>[0],
  networks: readonly NetworkName[],
  options: Parameters<typeof uptoOffer>[2],
): PaymentRequirementsV2[] {
  return networks.flatMap((network) => {
    const offered = familyOf(network).uptoIncoming?.offer(deps, network, options);
    return offered?.ok ? [offered.value] : [];
  });
}
