/**
 * /relay paid through a batch-settlement channel (x402 version 2): the client's deposit or voucher
 * is taken against our mirror of its channel (payments/incoming/channels/receive.ts: one signature
 * recovery, no chain read for a voucher), the request holds the channel's lease (one at a time per
 * channel, in every instance), the target is paid from our wallet and called, and the price is
 * committed on the channel only once the target answered usably. A target that sells batch-settlement
 * itself is paid by a voucher on our own channel with it (no block waited on either side), and the
 * client's channel is charged what that seller charged plus the fee. A target that fails, or that we
 * could not pay, costs the client nothing and needs no refund transaction: the lease is released
 * and the same voucher pays the next request. The client's PAYMENT-RESPONSE carries `transaction`
 * "" for a voucher (the deposit's hash for a deposit), `extra.chargedAmount` and
 * `extra.channelState`. A refused payment gets a corrective 402 whose `error` is the
 * specification's code and whose channel entries carry our channel state and the last voucher we
 * hold. The worker claims and settles the committed charges (worker/tasks/channelClaims.ts).
 *
 * The daily relay limits count a channel payment as they count any other: the increment is added to
 * the payer's and the service's counters with the lease (a 429 when either would pass its limit,
 * the lease released, nothing charged), and what is not charged is taken back. Not recorded in
 * relay_transactions (no webhook records for channel payers): the charges are rows of
 * receiver_channel_charges.
 */
import { randomNonce } from '../../chains/evm';
import { caip2Of, canonicalNetwork, NETWORK_TABLE } from '../../basics/networkTable';
import { assetToMicro, microToAsset, usdToMicro } from '../../basics/money';
import { utcDay } from '../../basics/clock';
import { SYSTEM_SCOPE_ID, spentOn, subtractSpend, type SpendKey } from '../../accounts/limits';
import type { RelayLimitRefusal } from './admit';
import { sql } from 'kysely';
import { getAddress } from 'viem';
import { uptoRelaySettlement } from '../../accounts/fees';
import { chargedMicro, payThroughChannel } from '../../outgoing/channels';
import type { TargetResponse } from '../../basics/http/index';
import {
  reportedSettlement,
  settlementPendingOf,
  signTargetPayment,
  type CallBudget,
  type PayingDeps,
} from '../../outgoing/index';
import { isChannel, type PaymentChoice } from '../../x402/choose';
import { encodePaymentResponseHeader } from '../../x402/headers';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import {
  acceptChannelPayment,
  channelOffer,
  channelStateOf,
  commitChannelCharge,
  releaseChannel,
  type ChannelRefusal,
  type ChannelReservation,
} from '../../incoming/channels/receive';
import { DEFAULT_RELAY_TIMEOUT_SECONDS } from '../../incoming/offer';
import { sendNotedPaidCall } from '../discovery/resources';
import type { RelayCall, RelayOutcome } from './types';
import { channelReceipt } from '../../incoming/channels/offers';

/**
 * The batch-settlement entries of our 402 for a priced call: one on each network of the exact
 * entries where we take channels (CHANNEL_RECEIVER_NETWORKS), for the same total.
 */
export function relayChannelOffers(
  deps: Pick<PayingDeps, 'chains' | 'config'>,
  totalMicroUsdc: bigint,
  exactNetworks: readonly string[],
): PaymentRequirementsV2[] {
  const offers: PaymentRequirementsV2[] = [];
  for (const name of exactNetworks) {
    const network = canonicalNetwork(name);
    if (network === undefined) continue;
    const offer = channelOffer(deps, network, {
      amountMicroUsdc: totalMicroUsdc,
      maxTimeoutSeconds: DEFAULT_RELAY_TIMEOUT_SECONDS,
    });
    if (offer) offers.push(offer);
  }
  return offers;
}

export type ChannelRelayResult =
  | { kind: 'outcome'; outcome: RelayOutcome }
  | { kind: 'refused'; refusal: ChannelRefusal }
  | { kind: 'over_limit'; refusal: RelayLimitRefusal; payer: string };

/** The daily relay counters a channel payment moves: the payer's and the service's, in micro-USDC. */
function spendKeys(deps: Pick<PayingDeps, 'clock'>, reservation: ChannelReservation): [SpendKey, SpendKey] {
  const day = utcDay(deps.clock.now());
  const { networkClass } = NETWORK_TABLE[reservation.network];
  return [
    { scope: 'relay_wallet', scopeId: getAddress(reservation.payer), networkClass, day },
    { scope: 'relay_system', scopeId: SYSTEM_SCOPE_ID, networkClass, day },
  ];
}

/** Adds the request's increment to both counters, or to neither: the refusal of the first that would pass its limit. */
async function countSpend(
  deps: Pick<PayingDeps, 'db' | 'clock' | 'config'>,
  reservation: ChannelReservation,
  amountMicro: bigint,
): Promise<RelayLimitRefusal | undefined> {
  const [wallet, system] = spendKeys(deps, reservation);
  const limits = [usdToMicro(deps.config.relayDailyPerWalletUsd), usdToMicro(deps.config.relayDailyTotalUsd)] as const;
  const { rows } = await sql<{ refused: number | null }>`
    select add_spend(
      array['relay_wallet', 'relay_system']::text[], array[${wallet.scopeId}, ${system.scopeId}]::text[],
      array[${wallet.networkClass}, ${system.networkClass}]::text[], array[${limits[0]}::bigint, ${limits[1]}::bigint],
      ${wallet.day}::date, ${amountMicro}::bigint) as refused`.execute(deps.db);
  const refused = rows[0]?.refused ?? null;
  if (refused === null) return undefined;
  const byWallet = refused !== 2;
  return {
    scope: byWallet ? 'wallet' : 'system',
    spentMicro: await spentOn(deps.db, byWallet ? wallet : system),
    limitMicro: byWallet ? limits[0] : limits[1],
    requestedMicro: amountMicro,
  };
}

/** Takes back from both counters what a request added and was not charged. */
async function uncountSpend(
  deps: Pick<PayingDeps, 'db' | 'clock'>,
  reservation: ChannelReservation,
  amountMicro: bigint,
): Promise<void> {
  if (amountMicro <= 0n) return;
  for (const key of spendKeys(deps, reservation)) await subtractSpend(deps.db, key, amountMicro);
}

const NOT_CHARGED = 'nothing was charged on your channel';

export async function relayChannelClient(
  deps: PayingDeps,
  input: RelayCall,
  {
    choice,
    payload,
    offer,
    budget,
  }: { choice: PaymentChoice; payload: unknown; offer: PaymentRequirementsV2; budget: CallBudget },
): Promise<ChannelRelayResult> {
  // The lease outlives the call's own bound, so that no second request is served while this one may still be.
  const accepted = await acceptChannelPayment(deps, payload, offer, { leaseMs: input.timeoutMs + 30_000 });
  if (accepted.kind === 'refused') return { kind: 'refused', refusal: accepted.refusal };
  if (accepted.kind === 'refunded') {
    const { channel, txHash, amount, payer } = accepted;
    const body = Buffer.from(JSON.stringify({ message: 'Refund acknowledged', channelId: channel.channelId }));
    return {
      kind: 'outcome',
      outcome: {
        kind: 'pass_through',
        response: { status: 200, headers: { 'content-type': 'application/json' }, body, url: input.call.api_url },
        headers: {
          clientSettlement: {
            success: true,
            transaction: txHash,
            network: caip2Of(channel.network as never),
            payer,
            amount: amount.toString(),
            extra: { channelState: channelStateOf(channel) },
          },
        },
      },
    };
  }
  const { reservation } = accepted;
  const decimals = NETWORK_TABLE[reservation.network].decimals;
  const countedMicro = assetToMicro(reservation.increment, decimals);
  const overLimit = await countSpend(deps, reservation, countedMicro).catch(async (error: unknown) => {
    await releaseChannel(deps, reservation.channelId, reservation.pendingId);
    throw error;
  });
  if (overLimit) {
    await releaseChannel(deps, reservation.channelId, reservation.pendingId);
    return { kind: 'over_limit', refusal: overLimit, payer: getAddress(reservation.payer) };
  }
  const release = async () => {
    await releaseChannel(deps, reservation.channelId, reservation.pendingId);
    await uncountSpend(deps, reservation, countedMicro);
  };
  try {
    const served = isChannel(choice)
      ? await throughOurChannel(deps, input, { choice, budget, reservation })
      : await byExactPayment(deps, input, { choice, budget, reservation });
    if (served.kind === 'failed') {
      await release();
      return { kind: 'outcome', outcome: { kind: 'bad_gateway', message: served.message, headers: {} } };
    }
    const { response, paymentResponse } = served;
    const committed = await commitChannelCharge(deps, reservation, input.call.api_url, served.charge);
    // What the counters hold beyond the charge (a smaller charge, or none) is taken back.
    const chargedMicro = committed.ok ? assetToMicro(committed.charged, decimals) : 0n;
    await uncountSpend(deps, reservation, countedMicro - chargedMicro);
    if (!committed.ok) {
      deps.log.error(
        { channelId: reservation.channelId, code: committed.refusal.code, details: committed.refusal.details },
        'channel charge not committed after the target answered',
      );
      return { kind: 'outcome', outcome: { kind: 'pass_through', response, headers: { paymentResponse } } };
    }
    const { deposit } = reservation;
    return {
      kind: 'outcome',
      outcome: {
        kind: 'pass_through',
        response,
        headers: {
          paymentResponse,
          clientSettlement: channelReceipt(reservation, committed),
          ...(deposit ? { clientPayment: deposit.txHash } : {}),
        },
      },
    };
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
}

/**
 * How the target was served for a request leased on the client's channel: `failed` (nothing is
 * charged on the client's channel, the lease is released), or answered, with what the client's
 * channel is charged (`charge`, in its token's atomic units; the whole increment when absent).
 */
type Served =
  | { kind: 'failed'; message: string }
  | { kind: 'answered'; response: TargetResponse; paymentResponse: string; charge?: bigint };

interface Leased {
  choice: PaymentChoice;
  budget: CallBudget;
  reservation: ChannelReservation;
}

/** A target priced by exact (or upto at its maximum): our wallet signs a payment to it and calls it. */
async function byExactPayment(
  deps: PayingDeps,
  input: RelayCall,
  { choice, budget, reservation }: Leased,
): Promise<Served> {
  const signed = await signTargetPayment(deps, choice, {
    nonce: randomNonce(),
    windowSeconds: deps.config.relayPaymentWindowSeconds,
  });
  if (!signed.ok)
    return {
      kind: 'failed',
      message: `${signed.targetSide ? 'The target asks for a payment the service cannot make' : 'The service could not pay the target'}; ${NOT_CHARGED}`,
    };
  const prepared = signed.value;
  const answer = await sendNotedPaidCall(deps, input.call, prepared, choice, budget);
  const response: TargetResponse | undefined =
    answer.ok && usable(answer.value) && settlementPendingOf(answer.value) === undefined ? answer.value : undefined;
  deps.log.info(
    {
      channelId: reservation.channelId,
      network: choice.network,
      status: answer.ok ? answer.value.status : answer.reason,
    },
    'paid target call (relay, channel client)',
  );
  if (!response)
    return {
      kind: 'failed',
      message: answer.ok
        ? `The target answered ${answer.value.status}; ${NOT_CHARGED}`
        : `The target gave no answer (${answer.details}); ${NOT_CHARGED}`,
    };
  const targetTx = reportedSettlement(response);
  return {
    kind: 'answered',
    response,
    paymentResponse: encodePaymentResponseHeader({
      success: targetTx !== undefined,
      transaction: targetTx ?? '',
      network: choice.network,
      payer: prepared.payer,
    }),
  };
}

/**
 * A target that sells batch-settlement: paid by a voucher on our own channel with it
 * (payments/outgoing/channels.ts), so that no block is waited on either side. The client's channel
 * is charged what the seller reports it charged plus our fee (at most the increment it signed
 * for); a target that charged nothing costs nothing. A voucher left without a usable answer costs
 * the client nothing: whether the seller committed it is decided by our channel's next exchange,
 * at our cost. An answer whose charge we could not read is charged in full (the quoted price).
 */
async function throughOurChannel(
  deps: PayingDeps,
  input: RelayCall,
  { choice, budget, reservation }: Leased,
): Promise<Served> {
  const outcome = await payThroughChannel(deps, {
    call: input.call,
    choice,
    budget,
    callReference: `relay-channel:${reservation.channelId}:${reservation.pendingId}`,
  });
  const payer = deps.chains.evm.account?.address;
  deps.log.info(
    { channelId: reservation.channelId, network: choice.network, outcome: outcome.kind },
    'paid target call through our channel (relay, channel client)',
  );
  const receipt = (success: boolean, amount?: bigint) =>
    encodePaymentResponseHeader({
      success,
      transaction: '',
      network: choice.network,
      payer,
      ...(amount === undefined ? {} : { amount: amount.toString() }),
    });
  switch (outcome.kind) {
    case 'charged': {
      const { decimals } = NETWORK_TABLE[reservation.network];
      const increment = assetToMicro(reservation.increment, decimals);
      const { chargedMicro: due } = uptoRelaySettlement(
        chargedMicro(choice.network, outcome.chargedAtomic),
        increment,
        {
          percent: deps.config.relayFeePercent,
          minUsdc: deps.config.relayFeeMinUsdc,
        },
      );
      // A seller that charged nothing costs the client nothing (no fee on nothing).
      const charge = outcome.chargedAtomic === 0n ? 0n : microToAsset(due, decimals);
      return {
        kind: 'answered',
        response: outcome.response,
        paymentResponse: receipt(true, outcome.chargedAtomic),
        charge: charge < reservation.increment ? charge : reservation.increment,
      };
    }
    case 'not_charged':
      if (outcome.response && usable(outcome.response))
        return { kind: 'answered', response: outcome.response, paymentResponse: receipt(false), charge: 0n };
      return {
        kind: 'failed',
        message: `${outcome.response ? `The target answered ${outcome.response.status}` : 'The target could not be paid'} and charged nothing; ${NOT_CHARGED}`,
      };
    case 'unsigned':
      return {
        kind: 'failed',
        message: `${outcome.targetSide ? 'The target asks for a payment the service cannot make' : 'The service could not pay the target'} (${outcome.details}); ${NOT_CHARGED}`,
      };
    case 'unknown':
      if (outcome.response && usable(outcome.response))
        return { kind: 'answered', response: outcome.response, paymentResponse: receipt(true) };
      deps.log.warn(
        { channelId: reservation.channelId, voucherId: String(outcome.voucherId), details: outcome.details },
        'our voucher to the target is undecided; the client is not charged',
      );
      return { kind: 'failed', message: `The target gave no usable answer (${outcome.details}); ${NOT_CHARGED}` };
  }
}

/** An answer the client is charged for: not a server error and not a 402. */
function usable(response: TargetResponse): boolean {
  return response.status < 500 && response.status !== 402;
}
