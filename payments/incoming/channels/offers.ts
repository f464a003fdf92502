/**
 * Our batch-settlement entries as a client answers them, for every operation that takes channels
 * (/relay, the paid chat, credit purchases): which entry a payment's `accepted` echoes, our entries
 * corrected with our channel state for a corrective 402, the kind of refusal an error code is, and
 * the receipt of a committed charge.
 */
import type { PaymentRequirementsV2 } from '../../x402/v2';
import type { SettleFailureReason } from '../settle';
import { BATCH_SETTLEMENT_SCHEME } from '../../chains/evm/batchSettlement/voucher';
import { caip2Of } from '../../basics/networkTable';
import type { SettlementResponse } from '../../x402/types';
import { channelStateOf, type ChannelRefusal, type ChannelReservation } from './receive';
import type { StoredChannel } from './store';

/** The fields of an offer a client's `accepted` must echo; a corrective 402's state in `extra` is not one of them. */
const EXTRA_TERMS = ['name', 'version', 'receiverAuthorizer', 'withdrawDelay', 'minDeposit'] as const;

/** The channel entry of our 402 a payment accepted, or undefined. */
export function acceptedChannelOffer(
  accepted: PaymentRequirementsV2,
  offers: readonly PaymentRequirementsV2[],
): PaymentRequirementsV2 | undefined {
  if (accepted.scheme !== BATCH_SETTLEMENT_SCHEME) return undefined;
  const extra = accepted.extra;
  return offers.find(
    (offer) =>
      offer.network === accepted.network &&
      offer.amount === accepted.amount &&
      offer.asset.toLowerCase() === accepted.asset.toLowerCase() &&
      offer.payTo.toLowerCase() === accepted.payTo.toLowerCase() &&
      offer.maxTimeoutSeconds === accepted.maxTimeoutSeconds &&
      EXTRA_TERMS.every((term) => String(offer.extra[term]) === String(extra[term])),
  );
}

/** Our channel entries with the refusal's state (a corrective 402: the client adopts it after checking the voucher's signature). */
export function correctedChannelOffers(
  offers: readonly PaymentRequirementsV2[],
  refusal: ChannelRefusal,
): PaymentRequirementsV2[] {
  if (!refusal.channelState) return [...offers];
  return offers.map((offer) => ({
    ...offer,
    extra: {
      ...offer.extra,
      channelState: refusal.channelState,
      ...(refusal.voucherState ? { voucherState: refusal.voucherState } : {}),
    },
  }));
}

/** The kind of refusal a channel payment's error code is, for the code of our 402's body. */
export function channelRefusalReason(code: string): SettleFailureReason {
  if (/cumulative_amount_mismatch|cumulative_below_claimed|charge_exceeds/.test(code)) return 'wrong_amount';
  if (code.endsWith('voucher_signature')) return 'invalid_signature';
  if (/exceeds_balance|below_min_deposit/.test(code)) return 'insufficient_funds';
  if (/_mismatch$/.test(code)) return 'offer_mismatch';
  return 'invalid_transaction';
}

/**
 * The receipt of a committed channel charge, as every operation that takes channels renders it: `transaction` ""
 * for a voucher (the deposit's hash for a deposit), `extra.chargedAmount` and `extra.channelState`.
 */
export function channelReceipt(
  reservation: ChannelReservation,
  committed: { channel: StoredChannel; charged: bigint },
): SettlementResponse {
  const { deposit } = reservation;
  return {
    success: true,
    transaction: deposit?.txHash ?? '',
    network: caip2Of(reservation.network),
    payer: reservation.payer,
    amount: deposit ? deposit.amount.toString() : '',
    extra: { chargedAmount: committed.charged.toString(), channelState: channelStateOf(committed.channel) },
  };
}
