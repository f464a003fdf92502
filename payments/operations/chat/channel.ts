/**
 * What the service sells itself (a chat answer, credits) paid through a batch-settlement channel
 * (x402 version 2), as /relay takes one (payments/operations/relay/channelClient.ts): our 402 offers
 * a `batch-settlement` entry beside each exact one on the CHANNEL_RECEIVER_NETWORKS networks, for
 * the same amount; a client's deposit or voucher is taken against our mirror of its channel
 * (payments/incoming/channels/receive.ts) and holds the channel's lease while the work is done; the
 * caller commits the charge once the work is done, or releases the lease (nothing charged, no
 * refund transaction). A refused payment gets a corrective 402 with the specification's code.
 *
 * A cooperative refund is taken by POST /relay (the channel is the same one): the answers of what
 * we sell here have no shape for it.
 */
import { canonicalNetwork, NETWORK_TABLE, type NetworkClass, type NetworkName } from '../../basics/networkTable';
import { DEFAULT_RELAY_TIMEOUT_SECONDS } from '../../incoming/offer';
import type { Deps } from '../../deps';
import {
  acceptChannelPayment,
  channelOffer,
  CHANNEL_ERRORS,
  type ChannelReservation,
  type ChannelRefusal,
} from '../../incoming/channels/receive';
import type { DecodedClientPayment } from '../../incoming/clientPayment';
import type { SettleFailureReason } from '../../incoming/settle';
import type { PaymentRequirements } from '../../x402/types';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import { BATCH_SETTLEMENT_SCHEME } from '../../chains/evm/batchSettlement/voucher';
import { acceptedChannelOffer, channelRefusalReason, correctedChannelOffers } from '../../incoming/channels/offers';

export type SellingDeps = Pick<Deps, 'db' | 'chains' | 'config' | 'submissions' | 'log' | 'clock'>;

/** The class of the networks what the service sells is paid on: mainnet when it holds a wallet on one, else testnet. */
export function sellingNetworkClass(chains: Deps['chains']): NetworkClass {
  return chains.networks.some((network) => network.serviceAddress !== undefined && network.networkClass === 'mainnet')
    ? 'mainnet'
    : 'testnet';
}

/**
 * Our 402's batch-settlement entries, for the same amount: one beside each exact entry on a network
 * where we take channels, then one on each other network where we take channels of the class we
 * are paid in (a network whose stablecoin moves by Permit2 alone, MegaETH, has no exact entry).
 */
export function sellingChannelOffers(
  deps: Pick<Deps, 'chains' | 'config'>,
  accepts: readonly PaymentRequirements[],
  amountMicroUsdc: bigint,
): PaymentRequirementsV2[] {
  const networkClass = sellingNetworkClass(deps.chains);
  const networks = new Set<NetworkName>();
  for (const exact of accepts) {
    const network = canonicalNetwork(exact.network);
    if (network !== undefined) networks.add(network);
  }
  for (const network of deps.config.receiverChannels.networks)
    if (NETWORK_TABLE[network].networkClass === networkClass) networks.add(network);
  const timeoutOf = (network: NetworkName) =>
    (accepts.find((exact) => canonicalNetwork(exact.network) === network) ?? accepts[0])?.maxTimeoutSeconds ??
    DEFAULT_RELAY_TIMEOUT_SECONDS;
  const offers: PaymentRequirementsV2[] = [];
  for (const network of networks) {
    const offer = channelOffer(deps, network, { amountMicroUsdc, maxTimeoutSeconds: timeoutOf(network) });
    if (offer) offers.push(offer);
  }
  return offers;
}

/** A client's payment through a channel: what it accepted and its payload; undefined for any other payment. */
export function channelPaymentOf(
  payment: DecodedClientPayment,
): { accepted: PaymentRequirementsV2; payload: unknown } | undefined {
  if (payment.version !== 2 || payment.signature.accepted.scheme !== BATCH_SETTLEMENT_SCHEME) return undefined;
  return { accepted: payment.signature.accepted, payload: payment.signature.payload };
}

export type ChannelTaken =
  | { kind: 'reserved'; reservation: ChannelReservation }
  /** A 402: `error` the specification's code (or ours), `offers` our channel entries, corrected with our state. */
  | { kind: 'refused'; error: string; reason: SettleFailureReason; offers: PaymentRequirementsV2[] }
  /** Our failure (a chain we could not read or write); nothing was charged. */
  | { kind: 'unavailable'; details: string };

/** A refused channel payment: a corrective 402 (our channel entries with our state), or our failure. */
export function refusedChannelPayment(
  refusal: ChannelRefusal,
  offers: readonly PaymentRequirementsV2[],
): Exclude<ChannelTaken, { kind: 'reserved' }> {
  if (refusal.ours)
    return {
      kind: 'unavailable',
      details: `the channel payment could not be checked (${refusal.code}): ${refusal.details}`,
    };
  return {
    kind: 'refused',
    error: refusal.code,
    reason: channelRefusalReason(refusal.code),
    offers: correctedChannelOffers(offers, refusal),
  };
}

/**
 * Takes a channel payment against our channel entries: on success the request holds the channel's
 * lease for at most `leaseMs`, and its caller must commit the charge or release the lease.
 */
export async function takeChannelPayment(
  deps: SellingDeps,
  payment: { accepted: PaymentRequirementsV2; payload: unknown },
  offers: readonly PaymentRequirementsV2[],
  { leaseMs }: { leaseMs: number },
): Promise<ChannelTaken> {
  const offer = acceptedChannelOffer(payment.accepted, offers);
  if (offer === undefined)
    return {
      kind: 'refused',
      error:
        "offer_mismatch: accepted is none of the batch-settlement offers of this 402: echo one entry of PAYMENT-REQUIRED's accepts",
      reason: 'offer_mismatch',
      offers: [...offers],
    };
  if ((payment.payload as { type?: unknown } | null)?.type === 'refund')
    return refusedChannelPayment(
      { code: CHANNEL_ERRORS.payloadType, details: 'a refund of the channel is taken by POST /relay' },
      offers,
    );
  const accepted = await acceptChannelPayment(deps, payment.payload, offer, { leaseMs });
  if (accepted.kind === 'refused') return refusedChannelPayment(accepted.refusal, offers);
  if (accepted.kind === 'refunded')
    throw new Error(`channel ${accepted.channel.channelId} refunded through an operation that takes no refunds`);
  return { kind: 'reserved', reservation: accepted.reservation };
}
