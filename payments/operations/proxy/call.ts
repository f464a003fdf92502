/**
 * POST /proxy, the money side: call the target; when it asks for payment (x402 v1), choose what
 * we pay, sign, hold the credits and record the signed payment in one statement, send X-PAYMENT (at most MAX_PAID_ATTEMPTS times, always
 * the same payment), and charge only what the chain shows as paid. Anything left unknown is
 * handed to the watch job with a webhook record.
 *
 * 500 or 502: our own setup (no wallet key for an enabled network the target accepts, our wallet
 * short of USDC, our RPC endpoint failing) is a 500; anything about the target (unreachable, 5xx,
 * a 402 we cannot read or pay, requirements we cannot build a payment for) is a 502.
 */
import type { Deps } from '../../deps';

import type { AuthenticatedKey } from '../../accounts/accounts';
import type { ReservationRefusal, ReservationRefused } from '../../accounts/credits';
import { proxyCredits } from '../../accounts/fees';
import { formatUnits, MICRO_PER_CREDIT, parseUsdc } from '../../basics/money';
import { randomNonce } from '../../chains/evm';
import {
  buildTargetRequest,
  type CallRequest,
  type OutboundErrorCode,
  type TargetResponse,
} from '../../basics/http/index';
import type { Failure } from '../../basics/result';
import {
  callBudget,
  callTarget,
  decidePayment,
  namedRefusal,
  isClientError,
  MAX_PAID_ATTEMPTS,
  paymentRequiredOf,
  readPaymentOnChain,
  recipientRefusal,
  reportedSettlement,
  settlementPendingOf,
  signedFacts,
  signTargetPayment,
  type CallBudget,
  type PayingDeps,
  type OfferRefused,
  type TargetPayment,
  type TransferMethodUnsupported,
} from '../../outgoing/index';
import { encodePaymentResponseHeader } from '../../x402/headers';
import { isChannel, type PaymentChoice } from '../../x402/choose';
import type { TargetPaymentRequired } from '../../x402/parse';
import { proxyThroughChannel } from './channel';
import { forgetSellerQuote, keepSellerQuote, keptSellerQuote } from '../../outgoing/sellerQuotes';
import type { ClaimRef } from '../../basics/idempotency';
import { sendNotedPaidCall } from '../discovery/resources';
import { floorRefusal, type WalletBelowFloor } from '../../tracking/floorCheck';
import { hostRefusal, priceRefusal, type CallLimits, type LimitRefusal } from '../../accounts/policy';
import {
  chargeOf,
  chargeProxyPayment,
  holdProxyPayment,
  newProxyPayment,
  releaseProxyPayment,
  signedRecordOf,
  signedTargetPaymentOf,
  watchProxyPayment,
  type SignedRecord,
} from './records';

export interface ProxyCall {
  call: CallRequest;
  key: AuthenticatedKey;
  /** Bound on the whole call: every exchange with the target shares it. */
  timeoutMs: number;
  requestId: string;
  /** The idempotency record's claim the call runs under: its payment carries it. */
  idempotency?: ClaimRef;
  /** The caller's ceiling (`max_amount`) and its key's policy: a refusal comes before anything is paid. */
  limits?: CallLimits;
}

export type ProxyOutcome =
  | {
      kind: 'pass_through';
      response: TargetResponse;
      /**
       * Set when we paid: charged now, or left to the watch job whose record is webhookId.
       * `paymentResponse` is our X-PAYMENT-RESPONSE about our payment to the target (the target's
       * own x402 headers never reach the client).
       */
      payment?: ProxyPaymentReport;
    }
  | { kind: 'bad_request'; details: string }
  | LimitRefusal
  | TransferMethodUnsupported
  | OfferRefused
  | WalletBelowFloor
  | { kind: 'insufficient_credits'; details: string }
  | {
      kind: 'spend_limit';
      error: string;
      details: string;
      spentMicroUsdc: bigint;
      limitMicroUsdc: bigint;
      requestedMicroUsdc: bigint;
    }
  | { kind: 'bad_gateway'; message: string; details: string; upstreamStatus?: number; webhookId?: string }
  | { kind: 'configuration_error'; message: string; details: string };

/** What a paid call reports of its payment. */
export interface ProxyPaymentReport {
  charged: boolean;
  webhookId?: string;
  paymentResponse: string;
  /** The credits charged now (for upto: for what the target settled, plus the fee on it). */
  chargedCredits?: bigint;
}

/**
 * `budget` is the whole call's, shared with a second pass. `fresh`: the seller is asked its price
 * even when its last 402 to this request is kept (payments/outgoing/sellerQuotes.ts).
 */
export async function proxyCall(
  deps: PayingDeps,
  input: ProxyCall,
  { budget = callBudget(input.timeoutMs), fresh = false }: { budget?: CallBudget; fresh?: boolean } = {},
): Promise<ProxyOutcome> {
  const built = buildTargetRequest(input.call);
  if (!built.ok) return { kind: 'bad_request', details: built.details };
  const limits = input.limits ?? {};
  const refusedHost = hostRefusal(limits, input.call.api_url);
  if (refusedHost) return refusedHost;

  // A batch-settlement seller's 402 to this very request, kept from a call moments ago with the
  // channel payment chosen of it: its voucher is sent at once (a voucher moves nothing until the
  // seller commits it).
  const kept = fresh ? undefined : keptSellerQuote('proxy', built.value);
  let choice: PaymentChoice;
  let required: TargetPaymentRequired | undefined;
  if (kept) choice = kept.choice;
  else {
    const first = await callTarget(built.value, budget, deps);
    if (!first.ok) return unreachable(first);
    required = paymentRequiredOf(first.value);
    if (!required) return answerOf(first.value);
    const decision = decidePayment(required, {
      chains: deps.chains,
      maxAmountMicroUsdc: parseUsdc(deps.config.proxyMaxPaymentUsdc),
      channels: true,
    });
    if (!decision.ok) {
      const named = namedRefusal(decision);
      if (named) return named;
      return decision.reason === 'configuration'
        ? { kind: 'configuration_error', message: 'The service cannot pay this target', details: decision.details }
        : {
            kind: 'bad_gateway',
            message: 'The target asks for a payment the service does not make',
            details: decision.details,
            upstreamStatus: 402,
          };
    }
    choice = decision.value;
  }
  const refusedPrice = priceRefusal(limits, choice.amountMicroUsdc, choice.network);
  if (refusedPrice) return refusedPrice;
  // Our wallet under a floor on the network we would pay on: 503, before any credits are held.
  const belowFloor = await floorRefusal(deps, [choice.network]);
  if (belowFloor) return belowFloor;
  // Before anything is signed or held: a payTo that cannot receive the payment.
  const refusedRecipient = await recipientRefusal(deps.chains, choice);
  if (refusedRecipient) return refusedRecipient;
  if (isChannel(choice)) {
    if (required) keepSellerQuote('proxy', built.value, { required, choice });
    const paid = await proxyThroughChannel(deps, input, choice, budget);
    if (kept && !(paid.kind === 'pass_through' && paid.payment.charged)) {
      forgetSellerQuote('proxy', built.value);
      // The seller refused the voucher of its kept 402 and committed nothing: its price or terms
      // changed. Asked again, the call is paid on what it asks now.
      if (paid.kind === 'bad_gateway' && paid.upstreamStatus === 402 && paid.webhookId === undefined)
        return proxyCall(deps, input, { budget, fresh: true });
    }
    return paid.kind === 'hold_refused' ? refusal(paid.refused, paid.credits, input.key, choice) : paid;
  }
  return payAndRetry(deps, input, choice, budget);
}

function unreachable(error: Failure<OutboundErrorCode>): ProxyOutcome {
  if (isClientError(error.reason)) return { kind: 'bad_request', details: error.details };
  return {
    kind: 'bad_gateway',
    message: 'The target could not be reached or gave no usable answer',
    details: error.details,
  };
}

function answerOf(response: TargetResponse): ProxyOutcome {
  if (response.status >= 500) {
    return {
      kind: 'bad_gateway',
      message: 'The target answered with a server error',
      details: `the target answered ${response.status}`,
      upstreamStatus: response.status,
    };
  }
  return { kind: 'pass_through', response };
}

async function payAndRetry(
  deps: PayingDeps,
  input: ProxyCall,
  choice: PaymentChoice,
  budget: CallBudget,
): Promise<ProxyOutcome> {
  const { db, config, clock, log } = deps;
  const { totalCredits } = proxyCredits(choice.amountMicroUsdc, config.proxyFeePercent);
  const reference = randomNonce();
  // Signed first, held and recorded second: the row is written as "signed" together with the
  // reservation, in one statement, and only then does the payment leave this process. A refused
  // reservation just drops the signature it never sent; a payment that cannot be prepared holds
  // nothing.
  const prepared = await prepare(deps, choice, reference);
  if (!prepared.ok) return prepared.outcome;
  const payment = prepared.value;
  const signed = signedFacts(payment);
  const reservation = await holdProxyPayment(
    db,
    newProxyPayment(config, clock.now(), input, { reference, choice, credits: totalCredits }),
    signed,
  );
  if (!reservation.ok) return refusal(reservation, totalCredits, input.key, choice);

  try {
    return await sendAndSettle(
      deps,
      input,
      choice,
      reference,
      reservation.value.id,
      payment,
      signed,
      budget,
      totalCredits,
    );
  } catch (error) {
    // The payment may have left (a database write after the paid call failed): the watch job reads
    // the chain and charges or releases; the client gets the record to poll rather than a 500.
    log.error({ err: error, reference }, 'the paid call failed after signing; handed to the watch job');
    const { webhookId } = await handToWatch(() => watchProxyPayment(db, reference, { openRecord: true }));
    return {
      kind: 'bad_gateway',
      message: 'The call failed after the payment was signed; the payment is watched on-chain',
      details: error instanceof Error ? error.message : String(error),
      ...withWebhook(webhookId),
    };
  }
}

/**
 * Pauses between tries of handing a payment to the watch job after a database error: the
 * connections a database restart dropped are replaced within a moment on an idle machine, within
 * seconds on a busy one. Should every try fail, the sweep hands the payment to the watch job once
 * its authorization has expired (worker/tasks/proxyPaymentSweep.ts).
 */
const WATCH_RETRY_PAUSES_MS = [250, 500, 1_000, 2_000, 4_000];

async function handToWatch<T>(watch: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt += 1) {
    try {
      return await watch();
    } catch (error) {
      const pause = WATCH_RETRY_PAUSES_MS[attempt];
      if (pause === undefined) throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

async function sendAndSettle(
  deps: PayingDeps,
  input: ProxyCall,
  choice: PaymentChoice,
  reference: `0x${string}`,
  reservationId: bigint,
  payment: TargetPayment,
  signed: ReturnType<typeof signedFacts>,
  budget: CallBudget,
  credits: bigint,
): Promise<ProxyOutcome> {
  const { db, log } = deps;
  const answer = await sendNotedPaidCall(deps, input.call, payment, choice, budget);
  log.info(
    {
      reference,
      network: choice.network,
      amountMicroUsdc: String(choice.amountMicroUsdc),
      status: answer.ok ? answer.value.status : answer.reason,
    },
    'paid target call',
  );

  if (!answer.ok) {
    const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true });
    return {
      kind: 'bad_gateway',
      message: 'The target gave no usable answer after the payment was sent',
      details: answer.details,
      ...withWebhook(webhookId),
    };
  }
  const { value: response } = answer;
  const pending = settlementPendingOf(response);
  if (pending !== undefined) {
    // Neither refused nor paid: the target's settlement of our payment is under way. The credits
    // stay held; the watch job charges them once the chain shows the payment, or releases them once
    // it can no longer land.
    const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true, reportedTxHash: pending });
    return {
      kind: 'bad_gateway',
      message: "The target's settlement of our payment is still pending; the target gave no answer yet",
      details: `the target answered ${response.status} with settlement_pending (transaction ${pending}); the payment is watched on-chain and charged only if it lands`,
      upstreamStatus: response.status,
      ...withWebhook(webhookId),
    };
  }
  if (response.status === 402) {
    const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true });
    return {
      kind: 'bad_gateway',
      message: `Upstream refused payment after ${MAX_PAID_ATTEMPTS} attempts`,
      details: 'The target still answered 402 after the payment was sent; the payment is watched on-chain',
      upstreamStatus: 402,
      ...withWebhook(webhookId),
    };
  }
  if (response.status >= 500) {
    const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true });
    return {
      kind: 'bad_gateway',
      message: 'The target answered with a server error after the payment was sent',
      details: `the target answered ${response.status}; the payment is watched on-chain`,
      upstreamStatus: response.status,
      ...withWebhook(webhookId),
    };
  }
  const record = signedRecordOf(reservationId, reference, choice, signed, credits);
  return {
    kind: 'pass_through',
    response,
    payment: await settleNow(deps, reference, record, response, {
      network: choice.network,
      payer: signed.payer,
      credits,
    }),
  };
}

function withWebhook(webhookId: string | undefined): { webhookId?: string } {
  return webhookId === undefined ? {} : { webhookId };
}

type Prepared =
  { ok: true; value: TargetPayment } | { ok: false; reason: string; details: string; outcome: ProxyOutcome };

async function prepare(
  deps: Pick<Deps, 'chains' | 'clock' | 'balances' | 'config' | 'db' | 'submissions' | 'paymentBounds'>,
  choice: PaymentChoice,
  reference: `0x${string}`,
): Promise<Prepared> {
  // An authorization lives at most PROXY_PAYMENT_WINDOW_SECONDS: that also bounds how long credits stay held.
  const signed = await signTargetPayment(deps, choice, {
    nonce: reference,
    windowSeconds: deps.config.proxyPaymentWindowSeconds,
  });
  if (signed.ok) return signed;
  const outcome: ProxyOutcome = signed.targetSide
    ? {
        kind: 'bad_gateway',
        message: 'The service cannot build a payment for the target',
        details: signed.details,
        upstreamStatus: 402,
      }
    : { kind: 'configuration_error', message: 'The service could not prepare the payment', details: signed.details };
  return { ok: false, reason: signed.reason, details: signed.details, outcome };
}

/**
 * The target answered below 500 after our payment: charge now when the chain already shows the
 * transfer, otherwise hand it to the watch job. A 4xx usually means the target did not settle
 * (x402 servers settle only answers below 400); the job releases the credits once it expires.
 * `record` is the row as this call wrote it, built in memory rather than read back. An upto
 * payment is charged what the chain shows the target settled plus the fee on it, the rest of the
 * reservation released; while that amount is unknown the whole reservation stays held and the
 * watch job finds it.
 */
async function settleNow(
  deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'config'>,
  reference: string,
  record: SignedRecord,
  response: TargetResponse,
  ours: { network: string; payer: string; credits: bigint },
): Promise<ProxyPaymentReport> {
  const reportedTxHash = reportedSettlement(response);
  const reading = await readPaymentOnChain(deps.chains, signedTargetPaymentOf(record), {
    now: deps.clock.now(),
    ...(reportedTxHash ? { reportedTxHash } : {}),
  });
  // Our receipt, in version 1 form with our name of the network, says what the chain showed.
  const receipt = (success: boolean, transaction: string, extra: { errorReason?: string; amount?: bigint } = {}) =>
    encodePaymentResponseHeader({
      success,
      transaction,
      network: ours.network,
      payer: ours.payer,
      ...(extra.errorReason ? { errorReason: extra.errorReason } : {}),
      ...(extra.amount === undefined ? {} : { amount: extra.amount.toString() }),
    });
  const watch = async (): Promise<ProxyPaymentReport> => {
    const { webhookId } = await watchProxyPayment(deps.db, reference, {
      openRecord: true,
      ...(reportedTxHash ? { reportedTxHash } : {}),
    });
    return {
      charged: false,
      ...withWebhook(webhookId),
      paymentResponse: receipt(false, reportedTxHash ?? '', { errorReason: 'unconfirmed' }),
    };
  };
  if (reading.state !== 'settled') return watch();
  const charge = chargeOf(record, reading, deps.config.proxyFeePercent);
  if (charge.kind === 'amount_unknown') return watch();
  const transaction = reading.txHash ?? reportedTxHash ?? '';
  if (charge.kind === 'nothing_to_charge') {
    await releaseProxyPayment(deps.db, reference, { outcome: charge.details });
    return {
      charged: false,
      chargedCredits: 0n,
      paymentResponse: receipt(true, transaction, { amount: reading.amount }),
    };
  }
  const charged = await chargeProxyPayment(deps.db, reference, {
    ...(reading.txHash ? { txHash: reading.txHash } : {}),
    outcome: reading.details,
    ...(charge.used ? { used: charge.used } : {}),
  });
  return {
    charged,
    ...(charged ? { chargedCredits: charge.used?.credits ?? ours.credits } : {}),
    paymentResponse: receipt(true, transaction, charge.used ? { amount: reading.amount } : {}),
  };
}

const LIMIT_ERRORS: Record<ReservationRefusal, string> = {
  insufficient_credits: 'Insufficient credits',
  key_daily_cap: 'Daily API key spending cap exceeded',
  account_daily_limit: 'Daily account proxy limit exceeded',
  system_daily_limit: 'Daily system proxy limit exceeded',
};

function refusal(
  result: ReservationRefused,
  credits: bigint,
  key: AuthenticatedKey,
  choice: PaymentChoice,
): ProxyOutcome {
  if (result.reason === 'insufficient_credits') {
    return {
      kind: 'insufficient_credits',
      details: `This call needs ${credits} credits; ${result.balanceCredits} are available`,
    };
  }
  const spent = formatUnits(result.spentCredits, 3);
  const limit = formatUnits(result.limitCredits, 3);
  const whose =
    result.reason === 'key_daily_cap'
      ? `The API key ${key.prefix} has spent ${spent} of its daily cap of ${limit} USD (${result.limitCredits} credits) today`
      : result.reason === 'account_daily_limit'
        ? `The account has spent ${spent} of its ${limit} USD ${choice.networkClass} proxy limit today`
        : `The service has spent ${spent} of its ${limit} USD ${choice.networkClass} proxy limit today`;
  return {
    kind: 'spend_limit',
    error: LIMIT_ERRORS[result.reason],
    details: `${whose}; this call needs ${formatUnits(credits, 3)} USD. Daily limits reset at 00:00 UTC.`,
    spentMicroUsdc: result.spentCredits * MICRO_PER_CREDIT,
    limitMicroUsdc: result.limitCredits * MICRO_PER_CREDIT,
    requestedMicroUsdc: credits * MICRO_PER_CREDIT,
  };
}
