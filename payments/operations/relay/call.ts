/**
 * POST /relay, the money side. Without X-PAYMENT: the target is called unpaid; its own answer when
 * it asks for nothing, else our 402. With X-PAYMENT: the target is called unpaid again (its price
 * now, and the requirement we will pay), the payment is verified strictly against the 402 we would
 * send now, admitted (replay guard, daily limits), settled, and the target is paid from our wallet
 * on its own network (another chain type than the client's possibly) and called with our payment.
 *
 * Once the client's payment has settled the answer is never a 402 (a client that pays again on a
 * 402 would pay twice): it is the target's answer, or a 502 with a webhook record. Whenever the
 * target does not charge for the call, the client's payment is refunded by a job; the decision is
 * written with the job in one database transaction (outcome.ts).
 */
import type { Db } from '../../../db/index';
import { utcDay } from '../../basics/clock';
import { formatUnits, parseUsdc, usdToMicro } from '../../basics/money';
import { randomNonce } from '../../chains/evm';
import type { Chains } from '../../chains/index';
import { canonicalNetwork, NETWORK_TABLE, type NetworkClass, type NetworkName } from '../../basics/networkTable';
import { floorRefusal } from '../../tracking/floorCheck';
import type { TargetResponse } from '../../basics/http/index';
import {
  callBudget,
  readPaymentOnChain,
  reportedSettlement,
  settlementPendingOf,
  settledMicroUsdc,
  signedFacts,
  signTargetPayment,
  MAX_PAID_ATTEMPTS,
  type CallBudget,
  type PayingDeps,
  type TargetPayment,
} from '../../outgoing/index';
import { isChannel, isUpto, type PaymentChoice } from '../../x402/choose';
import { payTargetThroughChannel } from './channelTarget';
import { encodePaymentResponseHeader } from '../../x402/headers';
import type { PaymentRequirements, SettlementResponse } from '../../x402/types';
import type { X402Version } from '../../x402/v2';
import { admitClientPayment, type RelayLimitRefusal } from './admit';
import { uptoExposureRoom } from '../../accounts/limits';
import { deliver, deliverUsed, handOver, recordedTargetPayment, scheduleRefund, watchTargetPayment } from './outcome';
import { forgetRelayQuote, quoteRelay, relayOffers, relayUptoOffers, type RelayQuote } from './quote';
import type { RelayCall, RelayOutcome } from './types';
import { relayUptoClient } from './uptoClient';
import { relayChannelClient, relayChannelOffers } from './channelClient';
import { acceptedChannelOffer, channelRefusalReason, correctedChannelOffers } from '../../incoming/channels/offers';
import type { ChannelRefusal } from '../../incoming/channels/receive';
import { uptoIncomingOn } from '../../chains/registry';
import type { UptoPaymentSignature } from '../../chains/uptoIncoming';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import { settleClientPayment, settleMethodFor, type SettleFailureReason } from '../../incoming/settle';
import {
  findRelayTransaction,
  markSettleFailed,
  recordTargetPayment,
  targetPaymentColumns,
  type SettlingRow,
  type TargetPaymentRecord,
} from '../../incoming/store';
import type { VerifiedClientPayment } from '../../incoming/types';
import type { SettlementMethod } from '../../../db/schema';
import { ok, type Ok } from '../../basics/result';
import type { Deps } from '../../deps';
import { verifyDecodedPayment } from '../../incoming/verify';
import {
  acceptedUptoOffer,
  paymentHeaderName,
  type DecodedClientPayment,
  type ReceivedPayment,
} from '../../incoming/clientPayment';
import { sendNotedPaidCall } from '../discovery/resources';

export type { RelayCall, RelayHeaders, RelayOutcome, ServiceStatus } from './types';

/** The 400 of a payment header that did not decode; undefined when it did. */
function malformedPayment({ version, decoded }: ReceivedPayment): RelayOutcome | undefined {
  if (decoded.ok) return undefined;
  return {
    kind: 'bad_request',
    details: `${paymentHeaderName(version)} is not an x402 version ${version} payment: ${decoded.details}`,
  };
}

/** Verification and settlement failures that are the request's, not the payment's: a 400. */
const MALFORMED_PAYMENT = new Set<SettleFailureReason>(['invalid_header', 'unsupported_version', 'invalid_scheme']);
/** Failures on our side: a 500 (nothing was charged). */
const OUR_FAILURES = new Set<SettleFailureReason>([
  'invalid_offer',
  'rpc_unavailable',
  'not_found',
  'no_wallet',
  'network_not_enabled',
  'submission_queue_full',
]);

export async function relayCall(
  deps: PayingDeps & Pick<Deps, 'onUptoChargeLost' | 'onUptoRefused'>,
  input: RelayCall,
): Promise<RelayOutcome> {
  const budget = callBudget(input.timeoutMs);
  const version = input.payment?.version ?? 1;
  let payment: DecodedClientPayment | undefined;
  if (input.payment !== undefined) {
    const malformed = malformedPayment(input.payment);
    if (malformed) return malformed;
    if (input.payment.decoded.ok) payment = input.payment.decoded.value;
  }

  // A seller's kept 402 prices the call when nothing of the client's would settle on it: our 402,
  // and a voucher's call (a voucher moves nothing when the target refuses ours).
  const byVoucher = payment?.version === 2 && payment.signature.accepted.scheme === 'batch-settlement';
  const quote = await quoteRelay(deps, {
    call: input.call,
    budget,
    maxAmountMicroUsdc: input.maxAmountMicroUsdc,
    keep: payment === undefined || byVoucher,
  });
  if (quote.kind !== 'priced') return unpriced(quote);
  const accepts = await relayOffers(deps, quote, input);
  // Channels are offered for a target priced by exact (a fixed price is the voucher's increment) or
  // selling batch-settlement itself (its price is the increment's ceiling; what it charges is charged),
  // on the exact entries' networks and on a named network paid by channel only (Permit2's, MegaETH).
  const channelAccepts =
    quote.choice.requirements.scheme === 'exact' || isChannel(quote.choice)
      ? relayChannelOffers(deps, quote.fee.totalMicro, [
          ...new Set([...accepts.map((entry) => entry.network), ...(quote.namedNetwork ? [quote.namedNetwork] : [])]),
        ])
      : [];
  if (accepts.length === 0 && channelAccepts.length === 0) return noOffer(deps.chains, quote.choice.networkClass);
  // Our wallet under a floor where money would move (the target's network, and the client's,
  // where we settle and refund): 503 before anything of the client's moves.
  const belowFloor = await floorRefusal(deps, [quote.choice.network, ...paidOn(payment)]);
  if (belowFloor) return belowFloor;
  const uptoAccepts = relayUptoOffers(deps, quote, accepts);
  if (!payment) {
    // At the service's bound on upto exposure an upto permit would be refused: exact only, then.
    const room =
      uptoAccepts.length > 0 &&
      (await uptoExposureRoom(
        deps.db,
        quote.choice.networkClass,
        quote.fee.totalMicro,
        uptoExposureBounds(deps.config).exposureTotalMicro,
      ));
    return {
      kind: 'payment_required',
      accepts,
      uptoAccepts: [...channelAccepts, ...(room ? uptoAccepts : [])],
      error: 'X-PAYMENT header is required',
    };
  }
  const now = deps.clock.now();

  if (payment.version === 2 && payment.signature.accepted.scheme === 'batch-settlement') {
    const offer = acceptedChannelOffer(payment.signature.accepted, channelAccepts);
    if (offer === undefined)
      return refused(
        'offer_mismatch',
        "accepted is none of the batch-settlement offers of this 402: echo one entry of PAYMENT-REQUIRED's accepts",
        accepts,
        version,
        [...channelAccepts, ...uptoAccepts],
      );
    const result = await relayChannelClient(deps, input, {
      choice: quote.choice,
      payload: payment.signature.payload,
      offer,
      budget,
    });
    // A call that went wrong asks the seller its price again next time.
    if (result.kind !== 'outcome' || result.outcome.kind !== 'pass_through') forgetRelayQuote(input.call);
    if (result.kind === 'outcome') return result.outcome;
    if (result.kind === 'over_limit') return overLimit(result.refusal, result.payer, quote.choice.networkClass);
    return channelRefused(result.refusal, accepts, [
      ...correctedChannelOffers(channelAccepts, result.refusal),
      ...uptoAccepts,
    ]);
  }

  if (payment.version === 2 && payment.signature.accepted.scheme === 'upto') {
    const offer = acceptedUptoOffer(payment, uptoAccepts);
    if (offer === undefined)
      return refused(
        'offer_mismatch',
        "accepted is none of the upto offers of this 402: echo one entry of PAYMENT-REQUIRED's accepts verbatim",
        accepts,
        version,
        uptoAccepts,
      );
    const result = await relayUptoClient(deps, input, {
      choice: quote.choice,
      signature: payment.signature as unknown as UptoPaymentSignature,
      offer,
      budget,
      admission: {
        perWalletMicro: usdToMicro(deps.config.relayDailyPerWalletUsd),
        systemMicro: usdToMicro(deps.config.relayDailyTotalUsd),
        finishBy: watchAt(now, deps, input.idempotency !== undefined),
        ...uptoExposureBounds(deps.config),
      },
    });
    if (result.kind === 'outcome') return result.outcome;
    if (result.kind === 'over_limit') return overLimit(result.refusal, result.payer, quote.choice.networkClass);
    // Nothing moved; this payer is offered exact only (our 402 without its upto entries).
    if (result.kind === 'upto_refused') {
      const why = result.reason === 'payer_defaulted' ? 'upto_payer_defaulted' : 'upto_exposure_exceeded';
      return { kind: 'payment_required', accepts, error: `${why}: ${result.details}`.slice(0, 1000) };
    }
    return refused(result.reason, result.details, accepts, version, uptoAccepts);
  }

  const verified = await verifyDecodedPayment(payment, accepts, deps);
  if (!verified.ok) return refused(verified.reason, verified.details, accepts, version, uptoAccepts);
  const settleMethod = settleMethodFor(deps.config);
  const admitted = await admitClientPayment(
    deps.db,
    verified.value,
    {
      targetUrl: input.call.api_url,
      targetMethod: String(input.call.method).toUpperCase(),
      spendDay: utcDay(now),
      mode: 'relay',
      settleMethod,
      ...(input.idempotency ? { idempotency: input.idempotency } : {}),
    },
    {
      perWalletMicro: usdToMicro(deps.config.relayDailyPerWalletUsd),
      systemMicro: usdToMicro(deps.config.relayDailyTotalUsd),
      finishBy: watchAt(now, deps, input.idempotency !== undefined),
    },
  );
  if (!admitted.ok) {
    if (admitted.reason === 'limit_exceeded')
      return overLimit(admitted.refusal, verified.value.payer, quote.choice.networkClass);
    // Only an upto permit is refused for its payer's past or our upto exposure.
    if (admitted.reason !== 'nonce_already_used')
      throw new Error(`an exact payment was refused as upto: ${admitted.reason}`);
    return refused(admitted.reason, admitted.details, accepts, version, uptoAccepts);
  }
  const row = admitted.value;

  // Our payment to the target is signed before the client's is settled: one signed in time is
  // recorded by the settled move itself, and one we cannot make leaves the client's untouched,
  // unless it is our wallet that is short on the client's own network, where the client's
  // settlement may fund it (it is signed again after).
  // A target paid through our channel is paid by a voucher signed under the channel's lock, after.
  const presigned = isChannel(quote.choice)
    ? undefined
    : await signOurPayment(deps, quote.choice).catch((error: unknown) => ({
        ok: false as const,
        reason: 'signing_failed',
        details: error instanceof Error ? error.message : String(error),
        targetSide: false,
      }));
  if (presigned && !presigned.ok && (presigned.targetSide || quote.choice.network !== verified.value.network))
    return targetNotPayable(deps, row.id, presigned);
  const target = presigned?.ok
    ? { prepared: presigned.value, record: targetRecordOf(quote.choice, presigned.value) }
    : undefined;
  const freshUntil = deps.clock.now().getTime() + presignedFreshMs(deps.config.relayPaymentWindowSeconds);

  let settlement: Awaited<ReturnType<typeof settleClientPayment>>;
  try {
    settlement = await settleClientPayment(deps.db, row.id, deps, {
      verifiedJustNow: true,
      admitted: admittedSettling(row.id, verified.value, settleMethod),
      // Settled late, the signed payment has used too much of its window: signed again after.
      settledFields: () =>
        target !== undefined && deps.clock.now().getTime() <= freshUntil
          ? targetPaymentColumns(target.record)
          : undefined,
    });
  } catch (error) {
    // The payment may have moved (a database write after the broadcast failed): the job reads the chain.
    deps.log.error(
      { err: error, relayTransactionId: String(row.id) },
      'settling the client payment failed; handed to the watch job',
    );
    settlement = { kind: 'pending', txHash: null };
  }
  if (settlement.kind === 'failed')
    return refused(settlement.reason, settlement.details, accepts, version, uptoAccepts);
  if (settlement.kind === 'pending') {
    // It may still land: never a 402 now. If it does, the client (gone by then) is refunded.
    const { webhookId } = await handedOver(deps, row.id, () =>
      handOver(deps.db, row.id, {
        kind: 'relay_payment',
        message:
          'Your payment was sent but not confirmed in time; the target was not called. Once it confirms it is refunded.',
      }),
    );
    return {
      kind: 'bad_gateway',
      message: `Your payment could not be confirmed ${settlement.details === undefined ? 'in time' : `now: ${settlement.details}`}, so the target was not called; it is refunded if it settles`,
      headers: { ...(webhookId ? { webhookId } : {}), serviceStatus: 'payment_validating' },
    };
  }
  const clientPayment = settlement.txHash;
  const receipt = withClientSettlement({
    success: true,
    transaction: clientPayment,
    network: verified.value.network,
    payer: verified.value.payer,
  });
  const recorded = settlement.withFields !== undefined ? target : undefined;
  try {
    return receipt(await payTarget(deps, input, row, quote.choice, clientPayment, budget, recorded));
  } catch (error) {
    // Money moved: whatever failed here, the job finishes the transaction (refund, or delivery if the target was paid).
    deps.log.error(
      { err: error, relayTransactionId: String(row.id) },
      'relay failed after the client paid; handed to the watch job',
    );
    const { webhookId } = await handedOver(deps, row.id, () =>
      handOver(deps.db, row.id, {
        kind: 'relay_refund',
        message: 'The relay failed after your payment; it is refunded unless the target was paid',
      }),
    );
    return receipt({
      kind: 'bad_gateway',
      message: 'The relay failed after your payment settled; it is refunded unless the target was paid',
      headers: { clientPayment, ...(webhookId ? { webhookId } : {}) },
    });
  }
}

/**
 * Whether a payment would be accepted for this call now, without recording or settling it: the
 * proof a retry under an Idempotency-Key gives when it carries another payment than the first
 * call's (payments/operations/relay/retries.ts). Undefined when it verifies; else the refusal relayCall
 * would answer. Nothing is recorded, counted or settled.
 */
export async function checkRelayPayment(
  deps: Pick<Deps, 'config' | 'chains' | 'resolver' | 'clock' | 'log' | 'connections' | 'balances' | 'paymentBounds'>,
  input: RelayCall,
): Promise<RelayOutcome | undefined> {
  if (input.payment === undefined) return { kind: 'bad_request', details: 'a payment is required' };
  const { version, decoded } = input.payment;
  if (!decoded.ok) return malformedPayment(input.payment);
  const quote = await quoteRelay(deps, {
    call: input.call,
    budget: callBudget(input.timeoutMs),
    maxAmountMicroUsdc: input.maxAmountMicroUsdc,
  });
  if (quote.kind !== 'priced') return unpriced(quote);
  const accepts = await relayOffers(deps, quote, input);
  if (accepts.length === 0) return noOffer(deps.chains, quote.choice.networkClass);
  const uptoAccepts = relayUptoOffers(deps, quote, accepts);
  const payment = decoded.value;
  if (payment.version === 2 && payment.signature.accepted.scheme === 'upto') {
    const offer = acceptedUptoOffer(payment, uptoAccepts);
    const upto = offer === undefined ? undefined : uptoIncomingOn(offer.network);
    if (offer === undefined || upto === undefined)
      return refused(
        'offer_mismatch',
        'accepted is none of the upto offers of this 402',
        accepts,
        version,
        uptoAccepts,
      );
    const checked = await upto.verify(deps, payment.signature as unknown as UptoPaymentSignature, offer);
    return checked.ok ? undefined : refused(checked.reason, checked.details, accepts, version, uptoAccepts);
  }
  const verified = await verifyDecodedPayment(payment, accepts, deps);
  return verified.ok ? undefined : refused(verified.reason, verified.details, accepts, version, uptoAccepts);
}

/** The network a client's payment names, when it is one we know. */
function paidOn(payment: DecodedClientPayment | undefined): NetworkName[] {
  if (payment === undefined) return [];
  const network = canonicalNetwork(
    payment.version === 1 ? payment.payment.network : payment.signature.accepted.network,
  );
  return network === undefined ? [] : [network];
}

/**
 * The write that hands a call whose money moved to the jobs (its webhook record), tried again a
 * moment later and once more after a second: the database connection that failed the step before
 * it (a restart) has been replaced by then. If it never succeeds the client still gets its 502, with
 * no webhook id: the follow job looks at the row admitted with it (payments/operations/relay/follow.ts) and finishes it anyway.
 */
async function handedOver(
  deps: Pick<Deps, 'log'>,
  relayTransactionId: bigint,
  write: () => Promise<{ webhookId?: string }>,
): Promise<{ webhookId?: string }> {
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await write();
    } catch (error) {
      const wait = HAND_OVER_RETRY_MS[attempt];
      if (wait === undefined) {
        deps.log.error(
          { err: error, relayTransactionId: String(relayTransactionId) },
          'handing the relay to its job failed; the follow job finishes it',
        );
        return {};
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

const HAND_OVER_RETRY_MS = [250, 1_000];

/** Every answer that names the client's settled payment carries its receipt as well. */
function withClientSettlement(settlement: SettlementResponse) {
  return (outcome: RelayOutcome): RelayOutcome =>
    'headers' in outcome && outcome.headers.clientPayment !== undefined
      ? { ...outcome, headers: { ...outcome.headers, clientSettlement: settlement } }
      : outcome;
}

/**
 * No network to offer: either the only ones of the class are unknown to standard clients (offered
 * only when named, docs/decisions.md: the client must name one), or we hold no wallet there.
 */
function noOffer(chains: Chains, networkClass: NetworkClass): RelayOutcome {
  const nameable = chains.networks
    .filter(
      (network) =>
        network.networkClass === networkClass &&
        network.serviceAddress !== undefined &&
        !NETWORK_TABLE[network.name].knownToStandardClients,
    )
    .map((network) => network.name);
  if (nameable.length > 0) {
    return {
      kind: 'bad_request',
      details: `this target is paid on ${networkClass}, where this server is paid only on ${nameable.join(', ')}, which standard x402 clients do not know: name it in the body ("network": "${nameable[0]}")`,
    };
  }
  return {
    kind: 'internal_error',
    details: `this server can be paid on no ${networkClass} network (no wallet there, or the facilitator names no Solana fee payer)`,
  };
}

function unpriced(quote: Exclude<RelayQuote, { kind: 'priced' }>): RelayOutcome {
  switch (quote.kind) {
    case 'free':
      return { kind: 'pass_through', response: quote.response, headers: {} };
    case 'bad_request':
      return { kind: 'bad_request', details: quote.details };
    case 'bad_gateway':
      return {
        kind: 'bad_gateway',
        message: `The target could not be called or its answer cannot be used: ${quote.details}`,
        headers: {},
      };
    case 'configuration_error':
      return { kind: 'internal_error', details: quote.details };
    case 'price_above_limit':
    case 'transfer_method_unsupported':
    case 'asset_unsupported':
    case 'pay_to_account_missing':
      return quote;
  }
}

/** A payment refused before anything moved: malformed or repeated (400), ours (500), or not the payment asked for (402 again). */
/**
 * When the follow job first looks at an admitted payment: under an idempotency claim, once its
 * lease would have lapsed (the job looks again while the request renews it), so that a process
 * that died mid-payment has its payment finished within a lease, not after
 * RELAY_ABANDONED_AFTER_MS; without a claim, when the request is presumed gone.
 */
function watchAt(now: Date, deps: Pick<Deps, 'config'>, claimed: boolean): Date {
  const abandonedMs = deps.config.relayAbandonedAfterMs;
  const untilLookMs = claimed
    ? Math.min(abandonedMs, deps.config.idempotencyLeaseMs + LEASE_LOOK_MARGIN_MS)
    : abandonedMs;
  return new Date(now.getTime() + untilLookMs);
}

/** The watch job looks this long after the lease would lapse. */
const LEASE_LOOK_MARGIN_MS = 2_000;

function refused(
  reason: SettleFailureReason,
  details: string,
  accepts: PaymentRequirements[],
  version: X402Version,
  uptoAccepts: PaymentRequirementsV2[] = [],
): RelayOutcome {
  if (reason === 'nonce_already_used')
    return { kind: 'bad_request', details: `The payment authorization nonce was already used: ${details}`, reason };
  if (MALFORMED_PAYMENT.has(reason))
    return {
      kind: 'bad_request',
      details: `${paymentHeaderName(version)} is not an x402 version ${version} payment we take: ${details}`,
      reason,
    };
  if (OUR_FAILURES.has(reason))
    return {
      kind: 'internal_error',
      details: `The payment could not be checked or settled (${reason}); nothing was charged: ${details}`,
    };
  return { kind: 'payment_required', accepts, uptoAccepts, error: `${reason}: ${details}`.slice(0, 1000), reason };
}

/**
 * A channel payment refused: a corrective 402 whose `error` is the specification's code (its
 * channel entries carrying our state when the cumulative amount is not ours), or a 500 when the
 * failure is ours (a chain that could not be read or written); nothing was charged either way.
 */
function channelRefused(
  refusal: ChannelRefusal,
  accepts: PaymentRequirements[],
  offeredFirst: PaymentRequirementsV2[],
): RelayOutcome {
  if (refusal.ours)
    return {
      kind: 'internal_error',
      details: `The channel payment could not be checked (${refusal.code}); nothing was charged: ${refusal.details}`,
    };
  return {
    kind: 'payment_required',
    accepts,
    uptoAccepts: offeredFirst,
    error: refusal.code,
    reason: channelRefusalReason(refusal.code),
  };
}

/** The bounds on our exposure to upto permits admitted and not yet settled, in micro-USDC. */
function uptoExposureBounds(config: Deps['config']): {
  exposurePerWalletMicro: bigint;
  exposureTotalMicro: bigint;
} {
  return {
    exposurePerWalletMicro: parseUsdc(config.relayUptoExposurePerWalletUsdc),
    exposureTotalMicro: parseUsdc(config.relayUptoExposureTotalUsdc),
  };
}

function overLimit(refusal: RelayLimitRefusal, payer: string, networkClass: string): RelayOutcome {
  const spent = formatUnits(refusal.spentMicro, 6);
  const limit = formatUnits(refusal.limitMicro, 6);
  const requested = formatUnits(refusal.requestedMicro, 6);
  const whose =
    refusal.scope === 'wallet'
      ? `Wallet ${payer} has spent ${spent} of its ${limit} USD`
      : `The service has relayed ${spent} of its ${limit} USD`;
  return {
    kind: 'spend_limit',
    details: `${whose} ${networkClass} relay limit today; this payment is ${requested} USD. Nothing was settled. Daily limits reset at 00:00 UTC.`,
    spentMicroUsdc: refusal.spentMicro,
    limitMicroUsdc: refusal.limitMicro,
    requestedMicroUsdc: refusal.requestedMicro,
  };
}

async function payTarget(
  deps: PayingDeps,
  input: RelayCall,
  row: { id: bigint },
  choice: PaymentChoice,
  clientPayment: string,
  budget: CallBudget,
  /** Our payment to the target, signed and already recorded on the row with the settled move. */
  recorded: SignedTarget | undefined,
): Promise<RelayOutcome> {
  const { db, log } = deps;
  if (isChannel(choice)) return payTargetThroughChannel(deps, input, row, choice, clientPayment, budget);
  const made = recorded ? ok(recorded) : await signedAndRecorded(deps, row, choice, clientPayment);
  if (!made.ok) return made.outcome;
  const { prepared, record } = made.value;

  const answer = await sendNotedPaidCall(deps, input.call, prepared, choice, budget);
  log.info(
    {
      relayTransactionId: String(row.id),
      network: choice.network,
      amountMicroUsdc: String(choice.amountMicroUsdc),
      status: answer.ok ? answer.value.status : answer.reason,
    },
    'paid target call (relay)',
  );
  const upto = isUpto(choice);
  const ours = { clientPayment };
  const pending = answer.ok ? settlementPendingOf(answer.value) : undefined;
  if (pending !== undefined && answer.ok) {
    // Neither refused nor paid: the target's settlement of our payment is under way. The watch job
    // delivers once the chain shows it, or refunds the client once it can no longer land.
    const watched = await watchTargetPayment(db, row.id, {
      targetStatus: answer.value.status,
      reportedTxHash: pending,
    });
    return {
      kind: 'bad_gateway',
      message: `The target's settlement of our payment is still pending (transaction ${pending}); your payment is kept if it lands and refunded if it never can`,
      headers: { ...ours, ...(watched ? { webhookId: watched.webhookId } : {}), serviceStatus: 'payment_validating' },
    };
  }
  if (!answer.ok || answer.value.status === 402 || answer.value.status >= 500) {
    const targetStatus = answer.ok ? answer.value.status : undefined;
    const watched = await watchTargetPayment(db, row.id, {
      ...(targetStatus ? { targetStatus } : {}),
      ...(answer.ok ? withReport(answer.value) : {}),
    });
    const message = !answer.ok
      ? `The target gave no usable answer after it was paid (${answer.details}); your payment is refunded unless the target charged`
      : answer.value.status === 402
        ? `Upstream refused payment after ${MAX_PAID_ATTEMPTS} attempts; your payment is refunded once our payment to the target can no longer be used`
        : `The target answered ${answer.value.status} after it was paid; your payment is refunded unless the target charged`;
    return {
      kind: 'bad_gateway',
      message,
      headers: { ...ours, ...(watched ? { webhookId: watched.webhookId } : {}), serviceStatus: 'payment_validating' },
    };
  }

  const { value: response } = answer;
  const reportedTxHash = reportedSettlement(response);
  // The payment as the row recorded it above (the row only moves on from here by this call or a job
  // that reads the chain the same way).
  const reading = await readPaymentOnChain(deps.chains, recordedTargetPayment(row.id, record, reportedTxHash), {
    now: deps.clock.now(),
  });
  const receipt = (success: boolean, transaction: string, errorReason?: string, amount?: bigint) =>
    encodePaymentResponseHeader({
      success,
      transaction,
      network: choice.network,
      payer: prepared.payer,
      ...(errorReason ? { errorReason } : {}),
      ...(amount === undefined ? {} : { amount: amount.toString() }),
    });
  // upto: only what the chain shows the target settled is charged; the rest of the client's payment is refunded.
  const used = upto && reading.state === 'settled' ? settledMicroUsdc(choice.network, reading) : undefined;
  if (used !== undefined) {
    const { delivered, refund } = await deliverUsed(db, row.id, {
      txHash: used.txHash,
      targetStatus: response.status,
      usedMicro: used.usedMicro,
      fees: { percent: deps.config.relayFeePercent, minUsdc: deps.config.relayFeeMinUsdc },
    });
    log.info(
      {
        relayTransactionId: String(row.id),
        delivered,
        usedMicroUsdc: String(used.usedMicro),
        refundMicroUsdc: String(refund?.refundMicro ?? 0n),
      },
      'upto target settled; the unused part is refunded',
    );
    return {
      kind: 'pass_through',
      response,
      headers: {
        ...ours,
        paymentResponse: receipt(true, used.txHash, undefined, used.amount),
        ...(refund ? { webhookId: refund.webhookId, refundWebhookId: refund.webhookId } : {}),
      },
    };
  }
  if (reading.state === 'settled' && !upto) {
    await deliver(db, row.id, { ...(reading.txHash ? { txHash: reading.txHash } : {}), targetStatus: response.status });
    return {
      kind: 'pass_through',
      response,
      headers: { ...ours, paymentResponse: receipt(true, reading.txHash ?? reportedTxHash ?? '') },
    };
  }
  if (reading.state === 'expired') {
    const refund = await scheduleRefund(db, row.id, {
      reason: `the target answered ${response.status} without charging: ${reading.details}`,
      targetStatus: response.status,
      targetNeverCharged: true,
    });
    return {
      kind: 'pass_through',
      response,
      headers: {
        ...ours,
        paymentResponse: receipt(false, '', 'not_settled'),
        ...(refund ? { webhookId: refund.webhookId, refundWebhookId: refund.webhookId } : {}),
      },
    };
  }
  // Not charged yet: the target may still settle our payment within its window; if it never does, the client is refunded.
  const watched = await watchTargetPayment(db, row.id, { targetStatus: response.status, ...withReport(response) });
  return {
    kind: 'pass_through',
    response,
    headers: {
      ...ours,
      paymentResponse: receipt(false, reportedTxHash ?? '', 'unconfirmed'),
      ...(watched ? { webhookId: watched.webhookId } : {}),
      serviceStatus: 'payment_validating',
    },
  };
}

/** Our payment to the target: a fresh nonce, usable for RELAY_PAYMENT_WINDOW_SECONDS at most. */
function signOurPayment(deps: PayingDeps, choice: PaymentChoice) {
  return signTargetPayment(deps, choice, {
    nonce: randomNonce(),
    windowSeconds: deps.config.relayPaymentWindowSeconds,
  });
}

interface SignedTarget {
  prepared: TargetPayment;
  record: TargetPaymentRecord;
}

/** What the row records of our payment to the target before it leaves. */
function targetRecordOf(choice: PaymentChoice, prepared: TargetPayment): TargetPaymentRecord {
  return {
    network: choice.network,
    amountMicroUsdc: choice.amountMicroUsdc,
    paymentRef: prepared.reference,
    ...signedFacts(prepared),
    scheme: isUpto(choice) ? 'upto' : 'exact',
  };
}

/**
 * How long a payment to the target signed before the client's settlement may wait for it and still
 * be the one sent: a quarter of its window, at most PRESIGNED_FRESH_MAX_MS.
 */
function presignedFreshMs(windowSeconds: number): number {
  return Math.min((windowSeconds * 1000) / 4, PRESIGNED_FRESH_MAX_MS);
}

const PRESIGNED_FRESH_MAX_MS = 15_000;

/** The row as admit_relay_payment wrote it, already in settling: what settling it reads. */
function admittedSettling(id: bigint, verified: VerifiedClientPayment, method: SettlementMethod): SettlingRow {
  return {
    id,
    network: verified.idempotencyKey.network,
    asset: verified.idempotencyKey.asset,
    payment_payload: verified.payment,
    payment_requirements: verified.requirements,
    client_tx_hash: null,
    client_raw_tx: null,
    settle_method: method,
    // Written a moment ago by the database; only a lower bound of when the payment can have landed reads it.
    created_at: new Date(),
  };
}

/**
 * Our payment to the target could not be signed before anything of the client's moved: the
 * client's payment is given up unsettled (its row settle_failed, its amount off the daily limits)
 * and the answer says nothing was charged. Should that write fail, the row stays settling with
 * nothing broadcast and the follow job gives it up: at once when our wallet settles, once the
 * authorization has expired when the facilitator does (it cannot know the facilitator was not called).
 */
async function targetNotPayable(
  deps: Pick<PayingDeps, 'db' | 'log'>,
  id: bigint,
  signed: { reason: string; details: string; targetSide: boolean },
): Promise<RelayOutcome> {
  deps.log.warn(
    { relayTransactionId: String(id), reason: signed.reason, details: signed.details },
    'could not pay the target; the client payment is not settled',
  );
  try {
    await markSettleFailed(deps.db, id, 'target_not_payable', `${signed.reason}: ${signed.details}`);
  } catch (error) {
    deps.log.error(
      { err: error, relayTransactionId: String(id) },
      'giving up the unsettled payment failed; the follow job does',
    );
  }
  return {
    kind: 'target_not_payable',
    message: `${
      signed.targetSide
        ? 'The target asks for a payment the service cannot make'
        : 'The service could not pay the target'
    } (${signed.reason}: ${signed.details}); your payment was not settled and nothing was charged`,
  };
}

/**
 * Our payment to the target signed and recorded after the client's settled (the one signed before
 * was not written with the settlement); when it cannot be, the answer to give instead (the client's
 * payment is refunded).
 */
async function signedAndRecorded(
  deps: PayingDeps,
  row: { id: bigint },
  choice: PaymentChoice,
  clientPayment: string,
): Promise<Ok<SignedTarget> | { ok: false; outcome: RelayOutcome }> {
  const { db, log } = deps;
  const signed = await signOurPayment(deps, choice);
  if (!signed.ok) {
    log.warn(
      { relayTransactionId: String(row.id), reason: signed.reason, details: signed.details },
      'could not pay the target; refunding the client',
    );
    const refund = await scheduleRefund(db, row.id, {
      reason: `the service could not pay the target: ${signed.reason}: ${signed.details}`,
    });
    const why = signed.targetSide
      ? 'The target asks for a payment the service cannot make'
      : 'The service could not pay the target';
    return { ok: false, outcome: await gaveUp(db, row.id, clientPayment, refund, why) };
  }
  const target = { prepared: signed.value, record: targetRecordOf(choice, signed.value) };
  // Only a payment the row names may leave; if the row moved on, a job decided and nothing is sent.
  if (!(await recordTargetPayment(db, row.id, target.record)))
    return {
      ok: false,
      outcome: await gaveUp(
        db,
        row.id,
        clientPayment,
        undefined,
        'The relay was finished by the service before the target was paid',
      ),
    };
  return ok(target);
}

function withReport(response: TargetResponse): { reportedTxHash?: string } {
  const reported = reportedSettlement(response);
  return reported ? { reportedTxHash: reported } : {};
}

/** A 502 after the client paid and the target was not: the refund (scheduled here or by a job) is the record to poll. */
async function gaveUp(
  db: Db,
  id: bigint,
  clientPayment: string,
  refund: { webhookId: string } | undefined,
  reason: string,
): Promise<RelayOutcome> {
  const webhookId = refund?.webhookId ?? (await findRelayTransaction(db, id))?.webhook_id ?? undefined;
  return {
    kind: 'bad_gateway',
    message: `${reason}; your payment is refunded`,
    headers: { clientPayment, ...(webhookId ? { webhookId, refundWebhookId: webhookId } : {}) },
  };
}
