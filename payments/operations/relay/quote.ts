/**
 * What a relay of a call costs now: the target is called once without payment; when it answers an
 * x402 v1 402, the requirement we would pay is chosen and the relay fee added (payments/accounts/fees.ts).
 * /relay builds its 402 from this on the first call and recomputes it on the paid call (so the
 * amount verified is what we would charge now, whatever the client claims); /relay/sim reports it.
 */
import type { Deps } from '../../deps';
import { relayFee, type RelayFee } from '../../accounts/fees';
import { parseUsdc, usdToMicro } from '../../basics/money';
import type { Chains } from '../../chains/index';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { buildTargetRequest, type CallRequest, type TargetResponse } from '../../basics/http/index';
import {
  callTarget,
  decidePayment,
  namedRefusal,
  noAnswer,
  paymentRequiredOf,
  recipientRefusal,
  type CallBudget,
  type OfferRefused,
  type TransferMethodUnsupported,
} from '../../outgoing/index';
import { isChannel, isUpto, type PaymentChoice } from '../../x402/choose';
import { forgetSellerQuote, keepSellerQuote, keptSellerQuote } from '../../outgoing/sellerQuotes';
import { uptoOffers } from '../../chains/registry';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import type { PaymentRequirements } from '../../x402/types';
import { DEFAULT_RELAY_TIMEOUT_SECONDS, settleableOffers } from '../../incoming/offer';
import { ceilingRefusal, type PriceAboveLimit } from '../../accounts/policy';
import { withBazaar } from '../../x402/extensions';
import type { TargetPaymentRequired } from '../../x402/parse';

export type RelayQuote =
  /** The target did not ask for payment (any status below 500 but an x402 402): its answer, nothing to pay. */
  | { kind: 'free'; response: TargetResponse }
  /** `bazaar`: the target's discovery metadata, when its version 2 402 declares it (bounded). */
  | {
      kind: 'priced';
      choice: PaymentChoice;
      fee: RelayFee;
      namedNetwork?: NetworkName;
      bazaar?: Record<string, unknown>;
    }
  | { kind: 'bad_request'; details: string }
  /** The target asks more than the caller's `max_amount`: refused before any offer is made. */
  | PriceAboveLimit
  | TransferMethodUnsupported
  /** The target's asset is not the token we hold there, or its payTo cannot receive it: refused before any offer. */
  | OfferRefused
  | { kind: 'bad_gateway'; details: string }
  | { kind: 'configuration_error'; details: string };

/**
 * `keep`: a batch-settlement seller's 402 to this very request kept from moments ago is used
 * without calling the seller, and one we would pay through our channel is kept
 * (payments/outgoing/sellerQuotes.ts); a relay whose client pays by voucher (and its 402) uses it.
 */
export async function quoteRelay(
  deps: Pick<Deps, 'chains' | 'config' | 'resolver' | 'connections'>,
  {
    call,
    budget,
    maxAmountMicroUsdc,
    keep = false,
  }: { call: CallRequest; budget: CallBudget; maxAmountMicroUsdc?: bigint | undefined; keep?: boolean },
): Promise<RelayQuote> {
  const built = buildTargetRequest(call);
  if (!built.ok) return { kind: 'bad_request', details: built.details };
  const named = namedNetwork(deps.chains, call.network);
  if (named !== undefined && !named.ok) return { kind: 'bad_request', details: named.details };

  // A batch-settlement seller's 402 to this very request kept from moments ago, with the channel
  // payment chosen of it: the seller is not asked again.
  const kept = keep ? keptSellerQuote('relay', built.value) : undefined;
  let required: TargetPaymentRequired;
  let choice: PaymentChoice;
  if (kept) ({ required, choice } = kept);
  else {
    const answer = await callTarget(built.value, budget, deps);
    if (!answer.ok) return noAnswer(answer);
    const { value: response } = answer;
    if (response.status >= 500) return { kind: 'bad_gateway', details: `the target answered ${response.status}` };
    const read = paymentRequiredOf(response);
    if (!read) return { kind: 'free', response };
    required = read;
    // No price above the service's whole daily relay volume could ever be admitted.
    const decision = decidePayment(required, {
      chains: deps.chains,
      maxAmountMicroUsdc: usdToMicro(deps.config.relayDailyTotalUsd),
      channels: true,
    });
    if (!decision.ok) {
      const named = namedRefusal(decision);
      if (named) return named;
      return decision.reason === 'configuration'
        ? { kind: 'configuration_error', details: decision.details }
        : { kind: 'bad_gateway', details: decision.details };
    }
    choice = decision.value;
    if (keep && isChannel(choice)) keepSellerQuote('relay', built.value, { required, choice });
  }
  const refusedPrice = ceilingRefusal(maxAmountMicroUsdc, choice.amountMicroUsdc, choice.network);
  if (refusedPrice) return refusedPrice;
  if (named !== undefined && NETWORK_TABLE[named.network].networkClass !== choice.networkClass) {
    // Paying on one class for a target paid on the other would turn test money into real money.
    return {
      kind: 'bad_request',
      details: `network ${named.network} is a ${NETWORK_TABLE[named.network].networkClass} network; this target is paid on ${choice.networkClass} (${choice.network}), so a relay to it is paid on ${choice.networkClass}`,
    };
  }
  // A target nobody can pay now is refused before the client is asked to pay us.
  const refusedRecipient = await recipientRefusal(deps.chains, choice);
  if (refusedRecipient) return refusedRecipient;
  const fee = relayFee(choice.amountMicroUsdc, {
    percent: deps.config.relayFeePercent,
    minUsdc: deps.config.relayFeeMinUsdc,
  });
  return { kind: 'priced', choice, fee, ...(named ? { namedNetwork: named.network } : {}), ...withBazaar(required) };
}

/** Forgets the seller's kept 402 to this call: the next relay of it asks the seller again. */
export function forgetRelayQuote(call: CallRequest): void {
  const built = buildTargetRequest(call);
  if (built.ok) forgetSellerQuote('relay', built.value);
}

function namedNetwork(
  chains: Chains,
  name: string | undefined,
): { ok: true; network: NetworkName } | { ok: false; details: string } | undefined {
  if (name === undefined) return undefined;
  const network = canonicalNetwork(name);
  if (network === undefined) return { ok: false, details: `network ${name} is not a network of this service` };
  const enabled = chains.network(network);
  if (!enabled) return { ok: false, details: `network ${network} is not enabled on this server` };
  if (!enabled.serviceAddress) return { ok: false, details: `this server holds no wallet on ${network}` };
  return { ok: true, network };
}

/**
 * The entries of our 402 for a priced call (docs/architecture.md section 2 and docs/decisions.md): one per enabled network of
 * the target's class where we hold a wallet, the target's own network first, or only the named
 * one; amount = the quote's total; payTo our wallet; USDC there. When a facilitator settles, an
 * entry on a family whose settler pays the fees (Solana) names its fee payer, and is left out if
 * the facilitator names none.
 */
export async function relayOffers(
  deps: Pick<Deps, 'chains' | 'config'>,
  quote: Extract<RelayQuote, { kind: 'priced' }>,
  { resource, call }: { resource: string; call: CallRequest },
): Promise<PaymentRequirements[]> {
  const request = {
    networkClass: quote.choice.networkClass,
    ...(quote.namedNetwork ? { namedNetwork: quote.namedNetwork } : {}),
    preferredNetwork: quote.choice.network,
    amountMicroUsdc: quote.fee.totalMicro,
    resource,
    description: `Relay of ${String(call.method).toUpperCase()} ${call.api_url}`.slice(0, 500),
    mimeType: quote.choice.requirements.mimeType || 'application/json',
    maxTimeoutSeconds: DEFAULT_RELAY_TIMEOUT_SECONDS,
  };
  return settleableOffers(deps.chains, request, deps.config.facilitatorUrl, deps.config.facilitatorAuth);
}

/**
 * The upto entries of our 402 for a target that prices by upto (version 2 only, before the exact
 * entries): one on each network the exact entries offer whose family takes upto, for at most the
 * quote's total (the target's maximum plus the fee on it). Its permit stays valid past the end of
 * our own payment to the target (RELAY_PAYMENT_WINDOW_SECONDS) with the call's time to spare, so
 * that what the target settles late can still be charged. None for an exact-priced target, nor for
 * one whose maximum is above a bound on our upto exposure (RELAY_UPTO_EXPOSURE_PER_WALLET_USDC,
 * _TOTAL_USDC): no such permit could be admitted, so its clients are offered exact only.
 */
export function relayUptoOffers(
  deps: Pick<Deps, 'chains' | 'config'>,
  quote: Extract<RelayQuote, { kind: 'priced' }>,
  exactOffers: readonly PaymentRequirements[],
): PaymentRequirementsV2[] {
  if (!isUpto(quote.choice)) return [];
  const maximum = quote.fee.totalMicro;
  if (
    maximum > parseUsdc(deps.config.relayUptoExposurePerWalletUsdc) ||
    maximum > parseUsdc(deps.config.relayUptoExposureTotalUsdc)
  )
    return [];
  const networks = exactOffers.flatMap((entry) => {
    const network = canonicalNetwork(entry.network);
    return network === undefined ? [] : [network];
  });
  return uptoOffers(deps, networks, {
    maximumMicroUsdc: quote.fee.totalMicro,
    maxTimeoutSeconds: deps.config.relayPaymentWindowSeconds + DEFAULT_RELAY_TIMEOUT_SECONDS,
  });
}
