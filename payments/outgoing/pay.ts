/**
 * Paying a target from the service wallet, the steps /proxy and /relay share: sign the payment for
 * the chosen requirement (bounded in time, our balance read first), then send the call with that
 * one payment at most MAX_PAID_ATTEMPTS times. The payment is in the version the target asked in:
 * X-PAYMENT for version 1, PAYMENT-SIGNATURE echoing the offered entry verbatim for version 2.
 * What the caller records before sending, and what it concludes afterwards, is its own.
 */
import type { Deps } from '../deps';
import type { PreparedPayment } from '../chains/index';
import { familyOf } from '../chains/registry';
import {
  buildTargetRequest,
  type CallRequest,
  type TargetAnswer,
  type TargetRequest,
  type TargetResponse,
} from '../basics/http/index';
import type { PaymentChoice } from '../x402/choose';
import type { SignedPaymentPayload } from '../x402/types';
import { decodePaymentResponseHeader } from '../x402/headers';
import { extensionsForTarget, ourPaymentId } from '../x402/extensions';
import type { OfferV2 } from '../x402/parse';
import {
  encodeHeaderJson,
  PAYMENT_RESPONSE_HEADER,
  X402_VERSION_2,
  X_PAYMENT_RESPONSE_HEADER,
  type PaymentPayloadV2,
  type X402Version,
} from '../x402/v2';
import type { Failure, Ok } from '../basics/result';
import { ensureSpendingApproval } from './approval';
import { callTarget, type CallBudget } from './call';
export { BALANCE_FRESH_MS, WalletBalances } from '../chains/balances';
import type { SignedTargetPayment } from './chain';

/** Paid attempts per call, all with the one payment we signed: a target that still answers 402 has refused it. */
export const MAX_PAID_ATTEMPTS = 2;

/** Failures that come from the target's requirements (the target's fault); every other one is ours. */
const TARGET_SIDE_SIGN_FAILURES = new Set([
  'invalid_requirements',
  'asset_mismatch',
  'missing_fee_payer',
  'invalid_fee_payer',
  'destination_account_missing',
  'destination_account_invalid',
  'not_evm_network',
  'not_solana_network',
]);

/**
 * Our payment to a target, signed: `header` is the value of the header of `x402Version` (X-PAYMENT
 * for 1, PAYMENT-SIGNATURE for 2).
 */
/** What a paid call to a target uses, for /proxy and /relay alike: the database, the chains, the target's connection, and the approvals a payment may need first. */
export type PayingDeps = Pick<
  Deps,
  | 'db'
  | 'config'
  | 'chains'
  | 'resolver'
  | 'clock'
  | 'log'
  | 'connections'
  | 'balances'
  | 'submissions'
  | 'paymentBounds'
>;

export type TargetPayment = PreparedPayment & { x402Version: X402Version };

/** Our payment to a target, signed, or why it could not be (targetSide: the target's requirements are at fault). */
export type TargetSigningOutcome = Ok<TargetPayment> | (Failure<string> & { targetSide: boolean });

/**
 * PAYMENT-SIGNATURE for a version 2 offer: `accepted` and `resource` (and `extensions`) echo the
 * target's 402 verbatim, `payload` is the one our version 1 payment carries (EVM `{signature,
 * authorization}`, Solana `{transaction}`). Our EVM authorization may be valid for less than the
 * offer's maxTimeoutSeconds; `accepted` still echoes the offer as it was. A target that declares
 * payment-identifier gets our id for this payment (derived from its recorded reference, so every
 * send of the payment carries the same id); unknown extensions are echoed as they came.
 */
export function paymentSignatureHeader(
  offer: OfferV2,
  payload: PreparedPayment['payment']['payload'],
  paymentId: string,
): string {
  // The target's extensions echoed; where it declares payment-identifier, with our id for this payment.
  const extensions = extensionsForTarget(offer.extensions, paymentId);
  const payment: PaymentPayloadV2 = {
    x402Version: X402_VERSION_2,
    resource: offer.resource,
    accepted: offer.accepted,
    payload: payload as unknown as Record<string, unknown>,
    ...(extensions ? { extensions } : {}),
  };
  // Base64 of the JSON, as @x402/core's encodePaymentSignatureHeader writes it, without its per-byte string building.
  return encodeHeaderJson(payment);
}

/** A signed payment in the version of the offer it answers. */
function inTargetVersion(choice: Pick<PaymentChoice, 'offerV2'>, prepared: PreparedPayment): TargetPayment {
  if (choice.offerV2 === undefined) return { ...prepared, x402Version: 1 };
  return {
    ...prepared,
    header: paymentSignatureHeader(
      choice.offerV2,
      prepared.payment.payload,
      ourPaymentId(prepared.network, prepared.reference),
    ),
    x402Version: X402_VERSION_2,
  };
}

/**
 * Signs our payment for `choice`, after the standing approval it needs where it needs one
 * (approval.ts). An EVM authorization is valid at most `windowSeconds` (shorter
 * when the target asks) and uses `nonce`, recorded by the caller beforehand where it wants; a
 * wallet short of USDC is refused before signing where the family reads it first (signing needs no
 * funds, so the shortage would otherwise only show as the target's refusal; the Solana builder
 * reads the balance itself).
 */
export async function signTargetPayment(
  deps: Pick<Deps, 'chains' | 'clock' | 'balances' | 'db' | 'submissions' | 'paymentBounds'>,
  choice: PaymentChoice,
  { nonce, windowSeconds }: { nonce?: `0x${string}`; windowSeconds: number },
): Promise<TargetSigningOutcome> {
  const family = familyOf(choice.network);
  const shortage = await family.walletShortage(deps, choice, deps.clock.now().getTime());
  if (shortage) return { ok: false, ...shortage, targetSide: false };
  // A target paid through Permit2: our wallet's one approval of Permit2 on the token comes first.
  const approved = await ensureSpendingApproval(deps, choice);
  if (!approved.ok) return { ok: false, reason: approved.reason, details: approved.details, targetSide: false };
  // A scheme without a time bound (Solana's blockhash bounds it instead) reads no maxTimeoutSeconds.
  const requirements = {
    ...choice.requirements,
    maxTimeoutSeconds: Math.min(choice.requirements.maxTimeoutSeconds, windowSeconds),
  };
  const prepared = await deps.chains.createPayment(
    { ...choice, requirements },
    { now: deps.clock.now(), ...(nonce !== undefined ? { nonce } : {}) },
  );
  if (prepared.ok) return { ok: true, value: inTargetVersion(choice, prepared.value) };
  return {
    ok: false,
    reason: prepared.reason,
    details: prepared.details,
    targetSide: TARGET_SIDE_SIGN_FAILURES.has(prepared.reason),
  };
}

/** What to record about a signed payment before it leaves, so the chain can be read for it later. */
export function signedFacts(
  payment: PreparedPayment,
): { payer: string; payload: SignedPaymentPayload } & Pick<
  SignedTargetPayment,
  'payerSignature' | 'validBefore' | 'lastValidBlockHeight'
> {
  return {
    payer: payment.payer,
    // Kept to send the payment again if a reorg drops its settlement (payments/tracking/finality.ts).
    payload: payment.payment,
    payerSignature: familyOf(payment.network).referenceFields(payment.reference).payerSignature,
    validBefore: 'unixSeconds' in payment.expiresAt ? payment.expiresAt.unixSeconds : null,
    lastValidBlockHeight: 'blockHeight' in payment.expiresAt ? payment.expiresAt.blockHeight : null,
  };
}

/**
 * The call again with our payment (X-PAYMENT or PAYMENT-SIGNATURE, as the target asked), repeated
 * (same payment) while the target answers 402, at most MAX_PAID_ATTEMPTS times. A 402 that says
 * the settlement of our payment is still under way (settlementPendingOf) is not a refusal: the
 * payment may land, so it is not sent again.
 */
export async function sendPaidCall(
  call: CallRequest,
  payment: Pick<TargetPayment, 'header' | 'x402Version'>,
  budget: CallBudget,
  deps: Pick<Deps, 'config' | 'resolver' | 'connections'>,
): Promise<TargetAnswer> {
  const built = buildTargetRequest(call, {
    paymentHeader: payment.header,
    paymentVersion: payment.x402Version,
  }) as Ok<TargetRequest>;
  let answer = await callTarget(built.value, budget, deps);
  for (
    let attempt = 2;
    attempt <= MAX_PAID_ATTEMPTS &&
    answer.ok &&
    answer.value.status === 402 &&
    settlementPendingOf(answer.value) === undefined;
    attempt += 1
  ) {
    answer = await callTarget(built.value, budget, deps);
  }
  return answer;
}

/** The settlement answers a target sent with its response: PAYMENT-RESPONSE (version 2), then X-PAYMENT-RESPONSE (version 1), each decoded. */
function* settlementAnswers(response: Pick<TargetResponse, 'headers'>) {
  for (const name of [PAYMENT_RESPONSE_HEADER, X_PAYMENT_RESPONSE_HEADER]) {
    const value = response.headers[name];
    if (value === undefined) continue;
    const settlement = decodePaymentResponseHeader(Array.isArray(value) ? value[0] : value);
    if (settlement.ok) yield settlement.value;
  }
}

/**
 * The transaction a target reports in PAYMENT-RESPONSE (version 2) or X-PAYMENT-RESPONSE (version 1)
 * as its settlement of our payment: a hint, never a proof.
 */
export function reportedSettlement(response: Pick<TargetResponse, 'headers'>): string | undefined {
  for (const settlement of settlementAnswers(response))
    if (settlement.success && settlement.transaction !== '') return settlement.transaction;
  return undefined;
}

/** The errorReason of a settlement still under way (@x402/core's SETTLEMENT_PENDING_REASON). */
export const SETTLEMENT_PENDING = 'settlement_pending';

/**
 * The transaction a target reports as the settlement of our payment still under way: its
 * PAYMENT-RESPONSE (or X-PAYMENT-RESPONSE) `{success: false, errorReason: "settlement_pending",
 * transaction}`, as @x402/express answers (a 402) when its facilitator's settlement is pending.
 * Neither a refusal nor a payment: the chain decides, through the watch jobs.
 */
export function settlementPendingOf(response: Pick<TargetResponse, 'headers'>): string | undefined {
  for (const settlement of settlementAnswers(response))
    if (!settlement.success && settlement.errorReason === SETTLEMENT_PENDING && settlement.transaction !== '')
      return settlement.transaction;
  return undefined;
}
