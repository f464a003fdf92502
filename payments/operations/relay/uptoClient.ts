/**
 * /relay paid by upto (x402 version 2): a client whose x402 client speaks upto signs a maximum
 * (the target's maximum plus the fee on it, our 402's upto entry) and we settle, after the call,
 * only what the target used plus the fee on that, never more than the maximum. Nothing moves from
 * the client before the target is paid: the permit is verified strictly against the offer we would
 * make now, admitted (replay guard, daily limits counting the maximum, the bounds on our upto
 * exposure, a payer that once failed to pay refused), recorded, the target paid
 * by upto; once the chain shows what the target settled the permit is settled for the used amount
 * plus the fee (our signed transaction stored on the row before it leaves). A target that was not
 * paid leaves the permit unused: nothing is taken. What is not known when the request answers
 * (the target's settlement, or ours) is finished by the relay watch job (finish.ts), before the
 * permit's deadline, which our 402 sets past the end of our own payment's window.
 *
 *   received (permit admitted) -> target paid, recorded on the row while still received
 *   received -> settling (amount chosen: settled_atomic, charged_micro) -> settled -> delivered
 *   received -> settle_failed  the target never charged (or was never paid): nothing moved
 *   settling -> settle_failed  the charge lost: the target was paid, the permit can no longer be
 *                              settled (the payer revoked its Permit2 allowance or moved its funds,
 *                              the deadline passed). We bear the call's cost: an error log line,
 *                              prs_upto_charges_lost_total, the record ended payment_failed saying
 *                              so, the maximum stays counted against the payer's daily limits, and
 *                              the payer is never admitted by upto again (upto_defaulted_payers).
 *
 * While the row is received or settling its maximum counts against the bounds on our exposure to
 * unsettled upto permits, per wallet and in total (upto_exposure, RELAY_UPTO_EXPOSURE_*): that is
 * all a payer can hold of our money within a call, and what it can take by revoking, once. Leaving
 * those states (settled, settle_failed) takes it back (a trigger on the row's state).
 */
import type { Db } from '../../../db/index';
import { utcDay } from '../../basics/clock';
import type { Deps } from '../../deps';
import { uptoRelaySettlement } from '../../accounts/fees';
import { microToAsset } from '../../basics/money';
import { NETWORK_TABLE } from '../../basics/networkTable';
import { randomNonce } from '../../chains/evm';
import { uptoIncomingOn } from '../../chains/registry';
import type { UptoPaymentSignature, VerifiedUptoPayment } from '../../chains/uptoIncoming';
import type { SettleFailureReason } from '../../chains/types';
import type { TargetResponse } from '../../basics/http/index';
import {
  readPaymentOnChain,
  reportedSettlement,
  settledMicroUsdc,
  settlementPendingOf,
  signedFacts,
  signTargetPayment,
  type CallBudget,
  type PayingDeps,
} from '../../outgoing/index';
import { sendNotedPaidCall } from '../discovery/resources';
import type { PaymentChoice } from '../../x402/choose';
import { encodePaymentResponseHeader } from '../../x402/headers';
import type { PaymentPayload, PaymentRequirements } from '../../x402/types';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import { moveRelayTransaction } from '../../incoming/states';
import {
  findRelayTransaction,
  markSettled,
  markSettleFailed,
  replaceClientTxHash,
  storeClientTxHash,
  targetPaymentColumns,
  type RelayTransaction,
  type TargetPaymentRecord,
} from '../../incoming/store';
import type { VerifiedClientPayment } from '../../incoming/types';
import { admitClientPayment, type RelayLimitRefusal } from './admit';
import { deliver, endRecord, handOver, recordedTargetPayment } from './outcome';
import { usdcText } from '../../basics/money';
import type { RelayCall, RelayHeaders, RelayOutcome } from './types';

/**
 * What the upto path answers: an outcome, or a refusal the caller words as for an exact payment;
 * `upto_refused`: this payer may not pay by upto now (it defaulted once, or a bound on our upto
 * exposure is reached), nothing moved, and it is offered exact only.
 */
export type UptoRelayResult =
  | { kind: 'outcome'; outcome: RelayOutcome }
  | { kind: 'refused'; reason: SettleFailureReason; details: string }
  | { kind: 'over_limit'; refusal: RelayLimitRefusal; payer: string }
  | { kind: 'upto_refused'; reason: UptoRefusalReason; details: string };

/** Why an upto permit was refused by its payer's past or by our exposure: the label of prs_upto_refusals_total. */
export type UptoRefusalReason = 'payer_defaulted' | 'wallet_exposure' | 'total_exposure';

const outcome = (value: RelayOutcome): UptoRelayResult => ({ kind: 'outcome', outcome: value });

/**
 * The daily-limit and job settings of an admission, as the exact path computes them, and the
 * bounds on our exposure to open upto permits (RELAY_UPTO_EXPOSURE_PER_WALLET_USDC, _TOTAL_USDC).
 */
export interface UptoAdmission {
  perWalletMicro: bigint;
  systemMicro: bigint;
  finishBy: Date;
  exposurePerWalletMicro: bigint;
  exposureTotalMicro: bigint;
}

type UptoDeps = PayingDeps & Pick<Deps, 'onUptoChargeLost' | 'onUptoRefused'>;

/**
 * The row's record of an upto payment: the PAYMENT-SIGNATURE as the payment and our offer as the
 * requirement (what storedUptoPayment reads back), the maximum in micro-USDC as the amount.
 */
function admissionFacts(verified: VerifiedUptoPayment): VerifiedClientPayment {
  return {
    network: verified.network,
    chainType: verified.chainType,
    payer: verified.payer,
    payTo: verified.payTo,
    asset: verified.asset,
    amountMicroUsdc: verified.amountMicroUsdc,
    idempotencyKey: verified.idempotencyKey,
    payment: verified.payment as unknown as PaymentPayload,
    requirements: verified.offer as unknown as PaymentRequirements,
    ...(verified.validBefore === undefined ? {} : { validBefore: verified.validBefore }),
  };
}

/** The upto payment a row recorded, rebuilt for settling or reading our settlement; undefined if it cannot be. */
export function storedUptoOf(deps: Pick<Deps, 'chains'>, row: RelayTransaction): VerifiedUptoPayment | undefined {
  const offer = row.payment_requirements as PaymentRequirementsV2;
  const upto = uptoIncomingOn(offer.network);
  if (upto === undefined || row.maximum_atomic === null) return undefined;
  return upto.stored(deps, {
    payment: row.payment_payload as UptoPaymentSignature,
    offer,
    maximum: BigInt(row.maximum_atomic),
  });
}

export async function relayUptoClient(
  deps: UptoDeps,
  input: RelayCall,
  {
    choice,
    signature,
    offer,
    budget,
    admission,
  }: {
    choice: PaymentChoice;
    signature: UptoPaymentSignature;
    offer: PaymentRequirementsV2;
    budget: CallBudget;
    admission: UptoAdmission;
  },
): Promise<UptoRelayResult> {
  const upto = uptoIncomingOn(offer.network);
  if (upto === undefined) return { kind: 'refused', reason: 'invalid_offer', details: `no upto on ${offer.network}` };
  const verified = await upto.verify(deps, signature, offer);
  if (!verified.ok) return { kind: 'refused', reason: verified.reason, details: verified.details };
  const payment = verified.value;
  const { db } = deps;
  const admitted = await admitClientPayment(
    db,
    admissionFacts(payment),
    {
      targetUrl: input.call.api_url,
      targetMethod: String(input.call.method).toUpperCase(),
      spendDay: utcDay(deps.clock.now()),
      mode: 'relay',
      ...(input.idempotency ? { idempotency: input.idempotency } : {}),
    },
    admission,
    {
      maximumAtomic: payment.maximum,
      exposurePerWalletMicro: admission.exposurePerWalletMicro,
      exposureTotalMicro: admission.exposureTotalMicro,
    },
  );
  if (!admitted.ok) {
    if (admitted.reason === 'limit_exceeded')
      return { kind: 'over_limit', refusal: admitted.refusal, payer: payment.payer };
    if (admitted.reason === 'upto_exposure_exceeded') {
      const { scope, openMicro, limitMicro, requestedMicro } = admitted.exposure;
      const reason = scope === 'wallet' ? 'wallet_exposure' : 'total_exposure';
      deps.onUptoRefused(reason);
      const whose = scope === 'wallet' ? `wallet ${payment.payer}'s` : "the service's";
      return {
        kind: 'upto_refused',
        reason,
        details: `${usdcText(openMicro)} of upto permits not yet settled already count against ${whose} bound of ${usdcText(limitMicro)}; this permit's maximum is ${usdcText(requestedMicro)}. Nothing was taken: pay by exact, or by upto once earlier permits are settled`,
      };
    }
    if (admitted.reason === 'upto_payer_defaulted') {
      deps.onUptoRefused('payer_defaulted');
      deps.log.warn({ payer: payment.payer, network: payment.network }, 'upto permit of a defaulted payer refused');
      return { kind: 'upto_refused', reason: 'payer_defaulted', details: `${admitted.details}. Nothing was taken` };
    }
    return { kind: 'refused', reason: admitted.reason, details: admitted.details };
  }
  // The row says upto (and the maximum) from its first write: a crash at any point leaves a permit the job settles.
  const id = admitted.value.id;
  try {
    return outcome(await payTargetThenCharge(deps, input, id, choice, payment, budget));
  } catch (error) {
    // Whatever failed, the row says what was done: the watch job finishes it (settles what the target used, or nothing).
    deps.log.error({ err: error, relayTransactionId: String(id) }, 'upto relay failed midway; handed to the watch job');
    const { webhookId } = await handOver(db, id, {
      kind: 'relay_payment',
      message: 'The relay failed midway; your permit is settled only for what the target charged, if it did',
    }).catch(() => ({ webhookId: undefined }));
    return outcome({
      kind: 'bad_gateway',
      message: 'The relay failed midway; your permit is settled only for what the target charged, if it did',
      headers: { ...(webhookId ? { webhookId } : {}), serviceStatus: 'payment_validating' },
    });
  }
}

async function payTargetThenCharge(
  deps: UptoDeps,
  input: RelayCall,
  id: bigint,
  choice: PaymentChoice,
  payment: VerifiedUptoPayment,
  budget: CallBudget,
): Promise<RelayOutcome> {
  const { db, log } = deps;
  const signed = await signTargetPayment(deps, choice, {
    nonce: randomNonce(),
    windowSeconds: deps.config.relayPaymentWindowSeconds,
  });
  if (!signed.ok) {
    await settleNothing(db, id, 'target_not_paid', `the service could not pay the target: ${signed.reason}`);
    return {
      kind: 'bad_gateway',
      message: `${signed.targetSide ? 'The target asks for a payment the service cannot make' : 'The service could not pay the target'}; your permit was not used: nothing was taken`,
      headers: {},
    };
  }
  const prepared = signed.value;
  const record: TargetPaymentRecord = {
    network: choice.network,
    amountMicroUsdc: choice.amountMicroUsdc,
    paymentRef: prepared.reference,
    ...signedFacts(prepared),
    scheme: choice.requirements.scheme === 'upto' ? 'upto' : 'exact',
  };
  const recorded = await recordUnsettledTargetPayment(db, id, record);
  if (!recorded)
    return {
      kind: 'bad_gateway',
      message: 'The relay was finished by the service before the target was paid; your permit was not used',
      headers: {},
    };

  const answer = await sendNotedPaidCall(deps, input.call, prepared, choice, budget);
  log.info(
    {
      relayTransactionId: String(id),
      network: choice.network,
      maximumMicroUsdc: String(choice.amountMicroUsdc),
      status: answer.ok ? answer.value.status : answer.reason,
    },
    'paid target call (relay, upto client)',
  );
  const response: TargetResponse | undefined =
    answer.ok &&
    answer.value.status < 500 &&
    answer.value.status !== 402 &&
    settlementPendingOf(answer.value) === undefined
      ? answer.value
      : undefined;
  const reported = answer.ok ? (reportedSettlement(answer.value) ?? settlementPendingOf(answer.value)) : undefined;
  const reading = await readPaymentOnChain(deps.chains, recordedTargetPayment(id, record, reported), {
    now: deps.clock.now(),
  });
  const targetReceipt = (success: boolean, transaction: string, errorReason?: string, amount?: bigint) =>
    encodePaymentResponseHeader({
      success,
      transaction,
      network: choice.network,
      payer: prepared.payer,
      ...(errorReason ? { errorReason } : {}),
      ...(amount === undefined ? {} : { amount: amount.toString() }),
    });

  const used = reading.state === 'settled' ? settledMicroUsdc(choice.network, reading) : undefined;
  if (used !== undefined) {
    const charged = await chargeUptoClient(deps, id, payment, {
      usedMicro: used.usedMicro,
      txHash: used.txHash,
      ...(answer.ok ? { targetStatus: answer.value.status } : {}),
    });
    const headers: RelayHeaders = {
      paymentResponse: targetReceipt(true, used.txHash, undefined, used.amount),
      ...clientHeaders(payment, charged),
      ...(charged.kind === 'failed' && charged.webhookId ? { webhookId: charged.webhookId } : {}),
    };
    if (response) return { kind: 'pass_through', response, headers };
    return {
      kind: 'bad_gateway',
      message: `The target charged ${used.amount} but gave no usable answer; you pay what it used plus the fee`,
      headers,
    };
  }
  if (reading.state === 'expired') {
    await settleNothing(db, id, 'target_never_charged', `the target never charged: ${reading.details}`);
    const headers: RelayHeaders = {
      paymentResponse: targetReceipt(false, '', 'not_settled'),
      clientSettlement: { success: true, transaction: '', network: payment.network, payer: payment.payer, amount: '0' },
    };
    if (response) return { kind: 'pass_through', response, headers };
    return {
      kind: 'bad_gateway',
      message: 'The target did not answer usably and never charged; your permit was not used: nothing was taken',
      headers,
    };
  }
  // The target may still settle our payment: the job settles the permit for what it used, once the chain shows it.
  const { webhookId } = await handOver(db, id, {
    kind: 'relay_payment',
    message: `Watching the chain for our payment to the target on ${choice.network}; your permit is settled for what it used plus the fee`,
  });
  const headers: RelayHeaders = {
    paymentResponse: targetReceipt(false, reported ?? '', 'unconfirmed'),
    ...(webhookId ? { webhookId } : {}),
    serviceStatus: 'payment_validating',
  };
  if (response) return { kind: 'pass_through', response, headers };
  return {
    kind: 'bad_gateway',
    message: !answer.ok
      ? `The target gave no usable answer after it was paid (${answer.details}); your permit is settled only for what the target charges, if it ever does`
      : `The target answered ${answer.value.status} after it was paid; your permit is settled only for what the target charges, if it ever does`,
    headers,
  };
}

/** The headers naming our settlement of the client's permit (X-Client-Payment, PAYMENT-RESPONSE). */
function clientHeaders(payment: VerifiedUptoPayment, charged: UptoCharge): RelayHeaders {
  if (charged.kind !== 'settled' && charged.kind !== 'pending') return {};
  const { amount } = charged;
  return {
    clientPayment: charged.txHash,
    clientSettlement: {
      success: charged.kind === 'settled',
      transaction: charged.txHash,
      network: payment.network,
      payer: payment.payer,
      amount: amount.toString(),
      ...(charged.kind === 'pending' ? { errorReason: 'unconfirmed' } : {}),
    },
    ...(charged.kind === 'pending' ? { serviceStatus: 'payment_validating' as const } : {}),
  };
}

/** received -> settle_failed: nothing moved under the permit, and nothing will (its nonce stays unused). */
export async function settleNothing(db: Db, id: bigint, reason: string, details: string): Promise<void> {
  await markSettleFailed(db, id, reason, `${details}; the permit was not used: nothing was taken`);
}

/**
 * Our payment to the target, written on the still unsettled row of an upto client (the client's
 * permit is settled only after the target): once per row, as recordTargetPayment for exact clients.
 */
async function recordUnsettledTargetPayment(db: Db, id: bigint, target: TargetPaymentRecord): Promise<boolean> {
  const row = await db
    .updateTable('relay_transactions')
    .set(targetPaymentColumns(target))
    .where('id', '=', id)
    .where('state', '=', 'received')
    .where('scheme', '=', 'upto')
    .where('target_payment_ref', 'is', null)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

export type UptoCharge =
  | { kind: 'settled'; txHash: string; amount: bigint }
  | { kind: 'pending'; txHash: string; amount: bigint }
  /** Not sent now (the chain could not be read, the queue was full): the job tries again. */
  | { kind: 'later'; details: string }
  | { kind: 'nothing' }
  /** Could not be settled; `webhookId`: the record saying the charge was lost after the target was paid. */
  | { kind: 'failed'; reason: string; details: string; webhookId?: string };

/** What settling a permit needs (the loss of a charge is logged and counted). */
type SettlingDeps = Pick<
  Deps,
  'db' | 'chains' | 'clock' | 'paymentBounds' | 'submissions' | 'log' | 'onUptoChargeLost'
>;

/**
 * The target settled `usedMicro`: the client's permit is settled for it plus the fee on it (at
 * most the maximum), in the permit's token units. received -> settling with the amount chosen,
 * then the settlement; a row another caller is settling is followed, not settled twice.
 */
export async function chargeUptoClient(
  deps: SettlingDeps & Pick<Deps, 'config'>,
  id: bigint,
  payment: VerifiedUptoPayment,
  used: { usedMicro: bigint; txHash: string; targetStatus?: number },
): Promise<UptoCharge> {
  const { db } = deps;
  const row = await findRelayTransaction(db, id);
  if (!row) return { kind: 'failed', reason: 'not_found', details: `relay transaction ${id} is missing` };
  const { chargedMicro } = uptoRelaySettlement(used.usedMicro, row.amount_micro, {
    percent: deps.config.relayFeePercent,
    minUsdc: deps.config.relayFeeMinUsdc,
  });
  const inAsset = microToAsset(chargedMicro, NETWORK_TABLE[payment.network].decimals);
  const amount = inAsset < payment.maximum ? inAsset : payment.maximum;
  const claimed = await moveRelayTransaction(
    db,
    id,
    'settling',
    {
      settle_method: 'direct',
      settled_atomic: amount,
      charged_micro: chargedMicro,
      target_used_micro: used.usedMicro,
      target_tx_hash: used.txHash,
      ...(used.targetStatus === undefined ? {} : { target_status: used.targetStatus }),
    },
    { from: ['received'] },
  );
  const current = claimed ?? (await findRelayTransaction(db, id));
  if (!current || current.state !== 'settling') return asRecorded(current);
  return settleClaimedUpto(deps, current, payment);
}

/** What a row already past settling says of our settlement of its permit. */
function asRecorded(row: RelayTransaction | undefined): UptoCharge {
  if (!row) return { kind: 'failed', reason: 'not_found', details: 'no such relay transaction' };
  if (row.state === 'received' || row.state === 'settling') return { kind: 'later', details: `in ${row.state}` };
  if (row.state === 'settle_failed') return { kind: 'nothing' };
  return { kind: 'settled', txHash: row.client_tx_hash ?? '', amount: BigInt(row.settled_atomic ?? '0') };
}

const TRANSIENT = new Set<string>(['rpc_unavailable', 'submission_queue_full']);

/**
 * A row in settling (the amount chosen, on settled_atomic): our settlement sent, stored first, or
 * read again when it was sent before; confirmed -> settled -> delivered.
 */
export async function settleClaimedUpto(
  deps: SettlingDeps,
  row: RelayTransaction,
  payment: VerifiedUptoPayment,
): Promise<UptoCharge> {
  const { db } = deps;
  const upto = uptoIncomingOn(payment.network);
  if (upto === undefined) return { kind: 'later', details: `no upto on ${payment.network}` };
  const amount = BigInt(row.settled_atomic ?? '0');
  const stored = row.client_tx_hash;
  const send = (replacing: string | null) =>
    upto.settle(deps, payment, amount, (signed, refused) =>
      refused === undefined && replacing === null
        ? storeClientTxHash(db, row.id, signed.hash, signed.raw)
        : replaceClientTxHash(db, row.id, refused ?? (replacing as string), signed),
    );
  let result =
    stored === null
      ? await send(null)
      : await upto.read(deps, payment, stored as `0x${string}`, amount, row.client_raw_tx ?? undefined);
  // Our stored settlement can never be mined (its nonce went to another of ours): the permit is unused, signed again.
  if (!result.ok && result.reason === 'transaction_dropped' && stored !== null) result = await send(stored);
  if (!result.ok) {
    if (TRANSIENT.has(result.reason)) return { kind: 'later', details: result.details };
    // Another caller stored its own transaction meanwhile: that one is followed, not given up.
    const now = await findRelayTransaction(db, row.id);
    if (now?.state === 'settling' && now.client_tx_hash !== row.client_tx_hash)
      return { kind: 'later', details: 'settled by another caller' };
    // Nothing moved under the permit (refused before sending, or reverted) and the target was paid: the charge is lost.
    const webhookId = await chargeLost(deps, row, result.reason, result.details);
    return {
      kind: 'failed',
      reason: result.reason,
      details: result.details,
      ...(webhookId === undefined ? {} : { webhookId }),
    };
  }
  const settlement = result.value;
  if (settlement.state === 'nothing_to_settle') {
    await markSettleFailed(db, row.id, 'nothing_to_settle', 'nothing was used: the permit was not settled');
    return { kind: 'nothing' };
  }
  if (settlement.state === 'pending') return { kind: 'pending', txHash: settlement.txHash, amount };
  await markSettled(db, row.id, settlement.txHash);
  await deliver(db, row.id, {
    ...(row.target_tx_hash ? { txHash: row.target_tx_hash } : {}),
    ...(row.target_status === null ? {} : { targetStatus: row.target_status }),
  });
  return { kind: 'settled', txHash: settlement.txHash, amount };
}

/**
 * settling -> settle_failed after the target was paid: the permit can no longer be settled, so the
 * service bears what the target used. The payer is recorded as defaulted (upto_defaulted_payers:
 * never admitted by upto again) and the amount stays counted against its daily limits; its open
 * maximum leaves the exposure counters with the move; the record ends payment_failed saying what
 * happened; operators hear of it by an error log line and prs_upto_charges_lost_total. Once per row
 * (a guarded move). Returns the record's id when this call moved the row.
 */
async function chargeLost(
  deps: SettlingDeps,
  row: RelayTransaction,
  reason: string,
  details: string,
): Promise<string | undefined> {
  const chargedMicro = row.charged_micro ?? 0n;
  const usedMicro = row.target_used_micro ?? 0n;
  const target = `${usdcText(usedMicro)} on ${row.target_network ?? '?'}`;
  const webhookId = await deps.db.transaction().execute(async (tx) => {
    const moved = await markSettleFailed(tx, row.id, reason, details, { keepSpend: true });
    if (!moved) return undefined;
    // The payer is never admitted by upto again: what it can cost us is this one charge.
    await tx
      .insertInto('upto_defaulted_payers')
      .values({
        payer: row.payer,
        network: row.network,
        relay_transaction_id: row.id,
        reason,
        lost_micro: chargedMicro,
      })
      .onConflict((conflict) => conflict.column('payer').doNothing())
      .execute();
    return endRecord(tx, moved, 'relay_payment', {
      status: 'payment_failed',
      network: row.network,
      error: `${reason}: ${details}`.slice(0, 2000),
      message: `The call was made and the target paid (${target}), but your permit could not be settled for ${usdcText(chargedMicro)} (${reason}); nothing was taken from you`,
    });
  });
  if (webhookId === undefined) return undefined;
  deps.log.error(
    {
      relayTransactionId: String(row.id),
      payer: row.payer,
      network: row.network,
      amountLostMicroUsdc: String(chargedMicro),
      amountLostAtomic: row.settled_atomic ?? '0',
      targetUsedMicroUsdc: String(usedMicro),
      targetNetwork: row.target_network,
      targetTxHash: row.target_tx_hash,
      reason,
      details,
      webhookId,
    },
    "upto charge lost: the target was paid but the payer's permit could not be settled",
  );
  deps.onUptoChargeLost(row.network);
  return webhookId;
}
