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
 * the payer's and the service's counters with the lease, for the common voucher in the lease's own
 * statement (a 429 when either would pass its limit: no lease, nothing charged), and what is not
 * charged is taken back in the statement that commits the charge or ends the lease. Not recorded in
 * relay_transactions (no webhook records for channel payers): the charges are rows of
 * receiver_channel_charges.
 */
import { randomNonce } from '../../chains/evm';
import { caip2Of, canonicalNetwork, NETWORK_TABLE } from '../../basics/networkTable';
import { assetToMicro, microToAsset, usdToMicro } from '../../basics/money';
import { utcDay } from '../../basics/clock';
import {
  addSpendCall,
  giveBackSpend,
  SYSTEM_SCOPE_ID,
  spentOn,
  type SpendKey,
  type SpendMove,
} from '../../accounts/limits';
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
  acceptCountedChannelPayment,
  channelOffer,
  channelChargeParts,
  channelStateOf,
  commitChannelCharge,
  finishChannelCharge,
  leaseChargedOf,
  releaseChannel,
  type ChannelRefusal,
  type ChannelReservation,
  type ChannelSpend,
  type ChargeCommit,
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

/**
 * The daily relay counters a channel payment moves, the payer's and the service's (in this order,
 * as every relay payment locks them), with their limits: the request's increment, in micro-USDC.
 */
function relaySpend(deps: Pick<PayingDeps, 'clock' | 'config'>): ChannelSpend {
  return ({ payer, network, increment }) => {
    const day = utcDay(deps.clock.now());
    const { networkClass, decimals } = NETWORK_TABLE[network];
    const wallet: SpendKey = { scope: 'relay_wallet', scopeId: getAddress(payer), networkClass, day };
    const system: SpendKey = { scope: 'relay_system', scopeId: SYSTEM_SCOPE_ID, networkClass, day };
    return {
      move: { keys: [wallet, system], amount: assetToMicro(increment, decimals) },
      limits: [usdToMicro(deps.config.relayDailyPerWalletUsd), usdToMicro(deps.config.relayDailyTotalUsd)],
    };
  };
}

/** The refusal of the counter at add_spend's position `refusedBy` (the payer's, else the service's), with what it counts now. */
async function limitRefusal(
  db: PayingDeps['db'],
  { move, limits }: ReturnType<ChannelSpend>,
  refusedBy: number,
): Promise<RelayLimitRefusal> {
  const byWallet = refusedBy !== 2;
  const [walletKey, systemKey] = move.keys;
  const key = byWallet ? walletKey : systemKey;
  if (key === undefined) throw new Error("the relay counters are the payer's and the service's");
  return {
    scope: byWallet ? 'wallet' : 'system',
    spentMicro: await spentOn(db, key),
    limitMicro: (byWallet ? limits[0] : limits[1]) ?? 0n,
    requestedMicro: move.amount,
  };
}

/** Adds the increment to both counters, or to neither: null, or the position of the first that refused (add_spend). */
async function countSpend(db: PayingDeps['db'], counting: ReturnType<ChannelSpend>): Promise<number | null> {
  const { rows } = await sql<{ refused: number | null }>`
    select ${addSpendCall(counting.move, counting.limits)} as refused`.execute(db);
  return rows[0]?.refused ?? null;
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
  // For the common voucher the counters move in the lease's own statement (refused there when over a limit).
  const spend = relaySpend(deps);
  const accepted = await acceptCountedChannelPayment(deps, payload, offer, {
    leaseMs: input.timeoutMs + 30_000,
    spend,
  });
  if (accepted.kind === 'refused') return { kind: 'refused', refusal: accepted.refusal };
  if (accepted.kind === 'over_limit')
    return {
      kind: 'over_limit',
      refusal: await limitRefusal(deps.db, accepted, accepted.refusedBy),
      payer: getAddress(accepted.payer),
    };
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
  const { channelId, pendingId } = reservation;
  let counted = reservation.counted;
  if (counted === undefined) {
    // A lease the slow path took (a deposit, a channel read again): the counters after it.
    const counting = spend({
      payer: reservation.payer,
      network: reservation.network,
      increment: reservation.increment,
    });
    const refusedBy = await countSpend(deps.db, counting).catch(async (error: unknown) => {
      await releaseChannel(deps, channelId, pendingId);
      throw error;
    });
    if (refusedBy !== null) {
      await releaseChannel(deps, channelId, pendingId);
      return {
        kind: 'over_limit',
        refusal: await limitRefusal(deps.db, counting, refusedBy),
        payer: getAddress(reservation.payer),
      };
    }
    counted = counting.move;
  }
  // A call that fails, or throws, ends the lease and gives the counters back, in one statement.
  const move = counted;
  const release = () => releaseChannel(deps, channelId, pendingId, move);
  let served: Served;
  try {
    served = isChannel(choice)
      ? await throughOurChannel(deps, input, { choice, budget, reservation, counted: move })
      : await byExactPayment(deps, input, { choice, budget, reservation, counted: move });
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
  if (served.kind === 'failed') {
    await release();
    return { kind: 'outcome', outcome: { kind: 'bad_gateway', message: served.message, headers: {} } };
  }
  const { response, paymentResponse } = served;
  const charge = served.charge ?? reservation.increment;
  // What the counters hold beyond the charge (a smaller charge, or none) is taken back with it.
  const giveBack = givenBackOf(reservation, move, charge);
  let committed: ChargeCommit;
  try {
    // Its common case may have run already, with our own voucher's answer (served.leaseCharge).
    committed =
      served.leaseCharge === undefined
        ? await commitChannelCharge(deps, reservation, input.call.api_url, charge, giveBack)
        : await finishChannelCharge(
            deps,
            reservation,
            { amount: charge, targetUrl: input.call.api_url, giveBack },
            leaseChargedOf(served.leaseCharge),
          );
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
  if (!committed.ok) {
    deps.log.error(
      { channelId, code: committed.refusal.code, details: committed.refusal.details },
      'channel charge not committed after the target answered',
    );
    // Nothing was charged: what the request counted goes back (the lease is no longer ours).
    await giveBackSpend(deps.db, move).catch((error: unknown) =>
      deps.log.error({ err: error, channelId }, 'daily counters not given back after a channel charge failed'),
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
}

/**
 * How the target was served for a request leased on the client's channel: `failed` (nothing is
 * charged on the client's channel, the lease is released), or answered, with what the client's
 * channel is charged (`charge`, in its token's atomic units; the whole increment when absent).
 */
type Served =
  | { kind: 'failed'; message: string }
  | {
      kind: 'answered';
      response: TargetResponse;
      paymentResponse: string;
      charge?: bigint;
      /** The columns of the client's charge written with our own voucher's answer (channelChargeParts). */
      leaseCharge?: Record<string, unknown>;
    };

interface Leased {
  choice: PaymentChoice;
  budget: CallBudget;
  reservation: ChannelReservation;
  /** What the request added to the daily counters. */
  counted: SpendMove;
}

/** What the counters give back once `charge` (atomic units) is charged of what the request counted. */
function givenBackOf(reservation: ChannelReservation, counted: SpendMove, charge: bigint): SpendMove {
  return { ...counted, amount: counted.amount - assetToMicro(charge, NETWORK_TABLE[reservation.network].decimals) };
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
  { choice, budget, reservation, counted }: Leased,
): Promise<Served> {
  const { decimals } = NETWORK_TABLE[reservation.network];
  /** The client's charge for what the seller charged: that plus the fee, at most the increment; nothing for nothing. */
  const chargeFor = (chargedAtomic: bigint): bigint => {
    if (chargedAtomic === 0n) return 0n;
    const { chargedMicro: due } = uptoRelaySettlement(
      chargedMicro(choice.network, chargedAtomic),
      assetToMicro(reservation.increment, decimals),
      { percent: deps.config.relayFeePercent, minUsdc: deps.config.relayFeeMinUsdc },
    );
    const charge = microToAsset(due, decimals);
    return charge < reservation.increment ? charge : reservation.increment;
  };
  const outcome = await payThroughChannel(deps, {
    call: input.call,
    choice,
    budget,
    callReference: `relay-channel:${reservation.channelId}:${reservation.pendingId}`,
    // The client's charge is committed with our voucher's answer, in one statement that waits
    // for its flush (money nothing else would charge again); the rest of the commit follows it.
    chargeAlong: (chargedAtomic) => {
      const charge = chargeFor(chargedAtomic);
      if (charge <= 0n) return undefined;
      const giveBack = givenBackOf(reservation, counted, charge);
      return { ...channelChargeParts(reservation, charge, input.call.api_url, giveBack), flushed: true };
    },
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
    case 'charged':
      // A seller that charged nothing costs the client nothing (no fee on nothing).
      return {
        kind: 'answered',
        response: outcome.response,
        paymentResponse: receipt(true, outcome.chargedAtomic),
        charge: chargeFor(outcome.chargedAtomic),
        ...(outcome.along === undefined ? {} : { leaseCharge: outcome.along }),
      };
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
