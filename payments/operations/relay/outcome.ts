/**
 * What happens to a relay transaction after the client's payment settled, each decision written
 * in one database transaction together with the call's webhook record and the job that carries it
 * on (graphile_worker.add_job): a refund, a watch of our payment to the target on-chain, or the
 * delivery. A crash after the commit leaves a job; before it, the row as it was, which the watch
 * job finishes once its request is presumed gone.
 *
 * The call's webhook record (spec 3.3, docs/decisions.md) ends as:
 *   no_refund_needed   the target charged (our payment to it is on-chain)
 *   success_refunded   the target answered 2xx but never charged; the client's payment came back
 *   refund_confirmed   any other refund confirmed on-chain
 *   refund_failed      the refund failed after bounded retries
 *   payment_failed     the client's payment never settled (nothing to refund)
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../../../db/index';
import type { WebhookKind } from '../../../db/schema';
import { addJob, type JobName } from '../../basics/jobs';
import { uptoRelaySettlement, type RelayFeeSettings } from '../../accounts/fees';
import { usdcText } from '../../basics/money';
import { familyOf } from '../../chains/registry';
import { canonicalNetwork } from '../../basics/networkTable';
import type { SignedTargetPayment } from '../../outgoing/index';
import { completeWebhook, openWebhook, type WebhookOutcome } from '../../tracking/webhooks';
import { moveRelayTransaction } from '../../incoming/states';
import {
  inTransaction,
  markDelivered,
  markDeliveredUnrecorded,
  type Refund,
  type RelayTransaction,
  type TargetPaymentRecord,
} from '../../incoming/store';

type RelayTask = Extract<JobName, 'relay_watch' | 'relay_refund'>;
type RelayJobArgs = [db: Db | Tx, id: bigint, runAt?: Date, options?: { keepSchedule?: boolean }];

/** The job of `task` for one relay transaction, keyed by both; `keepSchedule` leaves a queued job's time alone. */
function enqueueRelayJob(
  task: RelayTask,
  db: Db | Tx,
  id: bigint,
  runAt?: Date,
  options: { keepSchedule?: boolean } = {},
): Promise<void> {
  return addJob(db, {
    task,
    payload: { relayTransactionId: String(id) },
    key: `${task}:${id}`,
    runAt,
    ...options,
  });
}

/** The watch job of a relay transaction; `keepSchedule` leaves a queued job's time alone. */
export function enqueueRelayWatch(...args: RelayJobArgs): Promise<void> {
  return enqueueRelayJob('relay_watch', ...args);
}

export function enqueueRelayRefund(...args: RelayJobArgs): Promise<void> {
  return enqueueRelayJob('relay_refund', ...args);
}

async function lockRow(tx: Tx, id: bigint): Promise<RelayTransaction | undefined> {
  return tx.selectFrom('relay_transactions').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

/** The call's record, opened on first need; one per relay transaction. */
async function recordOf(tx: Tx, row: RelayTransaction, kind: WebhookKind, message: string): Promise<string> {
  if (row.webhook_id) return row.webhook_id;
  const webhookId = await openWebhook(tx, { kind, network: row.network, message, relayTxId: row.id });
  await tx.updateTable('relay_transactions').set({ webhook_id: webhookId }).where('id', '=', row.id).execute();
  return webhookId;
}

/** Ends the call's record, opened now if it had none, in the caller's transaction; returns its id. */
export async function endRecord(
  tx: Tx,
  row: RelayTransaction,
  kind: WebhookKind,
  outcome: WebhookOutcome,
): Promise<string> {
  const webhookId = await recordOf(tx, row, kind, outcome.message);
  await completeWebhook(tx, webhookId, outcome);
  return webhookId;
}

/** Ends the call's record, if it has one still in flight. */
export async function closeRecord(
  db: Db | Tx,
  row: Pick<RelayTransaction, 'id' | 'webhook_id'>,
  outcome: WebhookOutcome,
): Promise<boolean> {
  const webhookId = row.webhook_id;
  if (!webhookId) return false;
  return inTransaction(db, (tx) => completeWebhook(tx, webhookId, outcome));
}

export interface RefundDecision {
  /** Why the client is refunded (kept on the row for operators). */
  reason: string;
  /** The status the target answered our paid call with, if it answered. */
  targetStatus?: number;
  /**
   * Set by a caller that read the chain and saw our payment to the target can no longer land. Without
   * it a row whose target payment was recorded is not refunded here: only the chain can say.
   */
  targetNeverCharged?: boolean;
}

/**
 * settled -> refund_pending (only from settled: a delivered call was charged by its target), with
 * the record opened and the refund job enqueued. A row that names a payment to the target moves
 * only when the caller saw on chain that the payment can no longer land. Returns the record's id,
 * or undefined when the row had moved on (someone else decided).
 */
export async function scheduleRefund(
  db: Db,
  id: bigint,
  decision: RefundDecision,
): Promise<{ webhookId: string } | undefined> {
  return db.transaction().execute(async (tx) => {
    const row = await moveRelayTransaction(
      tx,
      id,
      'refund_pending',
      {
        outcome: decision.reason.slice(0, 2000),
        ...(decision.targetStatus === undefined ? {} : { target_status: decision.targetStatus }),
      },
      { from: ['settled'], guard: { targetPaymentRefIsNull: !decision.targetNeverCharged } },
    );
    if (!row) return undefined;
    const webhookId = await recordOf(
      tx,
      row,
      'relay_refund',
      `Refunding ${usdcText(row.amount_micro)} to ${row.payer} on ${row.network}`,
    );
    await enqueueRelayRefund(tx, id);
    return { webhookId };
  });
}

/**
 * Our payment to the target may still be settled (or may never be): the record is opened and the
 * watch job looks at the chain from `runAt`. The target's answer and reported transaction are kept.
 */
export async function watchTargetPayment(
  db: Db,
  id: bigint,
  { targetStatus, reportedTxHash, runAt }: { targetStatus?: number; reportedTxHash?: string; runAt?: Date },
): Promise<{ webhookId: string } | undefined> {
  return db.transaction().execute(async (tx) => {
    const row = await lockRow(tx, id);
    if (!row || row.state !== 'settled') return row?.webhook_id ? { webhookId: row.webhook_id } : undefined;
    const webhookId = await recordOf(
      tx,
      row,
      'relay_payment',
      `Watching the chain for our payment to the target on ${row.target_network ?? row.network}`,
    );
    await tx
      .updateTable('relay_transactions')
      .set({
        target_status: targetStatus ?? row.target_status,
        target_tx_hash: row.target_tx_hash ?? reportedTxHash ?? null,
        responded_at: sql<Date>`coalesce(responded_at, now())`,
        updated_at: sql<Date>`now()`,
      })
      .where('id', '=', id)
      .execute();
    await enqueueRelayWatch(tx, id, runAt);
    return { webhookId };
  });
}

/**
 * The target was paid: settled -> delivered; a record in flight says no refund is needed. Usually
 * the row has no record (nothing went wrong): one guarded update. Otherwise the move and the
 * record's end are written in one transaction.
 */
export async function deliver(
  db: Db,
  id: bigint,
  { txHash, targetStatus }: { txHash?: string; targetStatus?: number },
): Promise<boolean> {
  const target = { ...(txHash ? { txHash } : {}), ...(targetStatus === undefined ? {} : { targetStatus }) };
  if (await markDeliveredUnrecorded(db, id, target)) return true;
  return db.transaction().execute(async (tx) => {
    const row = await markDelivered(tx, id, target);
    if (!row) return false;
    await closeRecord(tx, row, {
      status: 'no_refund_needed',
      network: row.target_network ?? row.network,
      ...(txHash ? { txHash } : {}),
      message: `The target charged for the call (${usdcText(row.target_amount_micro ?? 0n)} on ${row.target_network}); no refund is needed`,
    });
    return true;
  });
}

/**
 * An upto target settled `usedMicro` of its maximum, as the chain shows: settled -> delivered with
 * what the target used and what the client pays in the end (the used amount plus the fee on it, as
 * an exact target of that price would cost); when the client paid more (the maximum plus the fee,
 * with an exact payment), the rest is refunded on the network it paid on: delivered ->
 * refund_pending, the record opened and the refund job enqueued, in the same transaction. Never
 * more than was taken is refunded. Returns whether this call moved the row, and the refund.
 */
export async function deliverUsed(
  db: Db,
  id: bigint,
  {
    txHash,
    targetStatus,
    usedMicro,
    fees,
  }: { txHash?: string; targetStatus?: number; usedMicro: bigint; fees: RelayFeeSettings },
): Promise<{ delivered: boolean; chargedMicro?: bigint; refund?: { webhookId: string; refundMicro: bigint } }> {
  return db.transaction().execute(async (tx) => {
    const row = await lockRow(tx, id);
    if (!row || row.state !== 'settled') return { delivered: false };
    const { chargedMicro, refundMicro } = uptoRelaySettlement(usedMicro, row.amount_micro, fees);
    const delivered = await moveRelayTransaction(tx, id, 'delivered', {
      target_tx_hash: txHash ?? null,
      ...(targetStatus === undefined ? {} : { target_status: targetStatus }),
      target_used_micro: usedMicro,
      charged_micro: chargedMicro,
      refund_micro: refundMicro > 0n ? refundMicro : null,
    });
    if (!delivered) return { delivered: false };
    const used = `the target settled ${usdcText(usedMicro)} of at most ${usdcText(row.target_amount_micro ?? 0n)} on ${row.target_network}`;
    if (refundMicro === 0n) {
      await closeRecord(tx, delivered, {
        status: 'no_refund_needed',
        network: row.target_network ?? row.network,
        ...(txHash ? { txHash } : {}),
        message: `The target charged for the call (${used}); no refund is needed`,
      });
      return { delivered: true, chargedMicro };
    }
    const refunding = await moveRelayTransaction(
      tx,
      id,
      'refund_pending',
      {
        outcome: `${used}: ${usdcText(chargedMicro)} charged, the unused ${usdcText(refundMicro)} (the rest of the maximum and the fee on it) refunded`,
      },
      { from: ['delivered'] },
    );
    if (!refunding) throw new Error(`relay transaction ${id}: delivered, but not moved on to its refund`);
    const webhookId = await recordOf(
      tx,
      refunding,
      'relay_refund',
      `Refunding the unused ${usdcText(refundMicro)} to ${row.payer} on ${row.network}`,
    );
    await enqueueRelayRefund(tx, id);
    return { delivered: true, chargedMicro, refund: { webhookId, refundMicro } };
  });
}

/**
 * The request gives up while the transaction is open (its client gets an answer now): the watch
 * job takes over at once instead of waiting for the request to be presumed gone. Opens the record
 * with `message` when asked, for the client to poll.
 */
export async function handOver(
  db: Db,
  id: bigint,
  record?: { kind: WebhookKind; message: string },
): Promise<{ webhookId?: string }> {
  return db.transaction().execute(async (tx) => {
    const row = await lockRow(tx, id);
    if (!row) return {};
    const webhookId = record ? await recordOf(tx, row, record.kind, record.message) : (row.webhook_id ?? undefined);
    await tx
      .updateTable('relay_transactions')
      .set({ responded_at: sql<Date>`coalesce(responded_at, now())` })
      .where('id', '=', id)
      .execute();
    await enqueueRelayWatch(tx, id);
    return webhookId ? { webhookId } : {};
  });
}

/**
 * The record of a confirmed refund: success_refunded when the target had answered 2xx (and never
 * charged), else refund_confirmed; the refund of the unused part of an upto call is refund_confirmed.
 */
export function refundedOutcome(row: RelayTransaction, refund: Refund): WebhookOutcome {
  if (row.refund_micro !== null)
    return {
      status: 'refund_confirmed',
      txHash: refund.tx_hash ?? undefined,
      network: refund.network,
      method: refund.method,
      message: `Refund of the unused ${usdcText(refund.amount_micro)} to ${refund.recipient} confirmed on ${refund.network}${row.outcome ? `: ${row.outcome}` : ''}`,
    };
  const answered2xx = row.target_status !== null && row.target_status >= 200 && row.target_status < 300;
  return {
    status: answered2xx ? 'success_refunded' : 'refund_confirmed',
    txHash: refund.tx_hash ?? undefined,
    network: refund.network,
    method: refund.method,
    message: `Refund of ${usdcText(refund.amount_micro)} to ${refund.recipient} confirmed on ${refund.network}${row.outcome ? `: ${row.outcome}` : ''}`,
  };
}

/** The chain facts of our payment to the target, as the row recorded them before it was sent. */
export function targetPaymentOf(row: RelayTransaction): SignedTargetPayment {
  return targetPaymentFacts(row.id, {
    network: row.target_network ?? '',
    paymentRef: row.target_payment_ref,
    payer: row.target_payer,
    validBefore: row.target_valid_before,
    lastValidBlockHeight: row.target_last_valid_block_height,
    txHash: row.target_tx_hash,
    payload: row.target_payment_payload,
  });
}

/**
 * The same facts as this call wrote them (recordTargetPayment), built in memory rather than read
 * back; `txHash` is the target's report of its settlement, when it gave one.
 */
export function recordedTargetPayment(
  id: bigint,
  record: TargetPaymentRecord,
  txHash: string | undefined,
): SignedTargetPayment {
  return targetPaymentFacts(id, {
    network: record.network,
    paymentRef: record.paymentRef,
    payer: record.payer ?? null,
    validBefore: record.validBefore ?? null,
    lastValidBlockHeight: record.lastValidBlockHeight ?? null,
    txHash: txHash ?? null,
    payload: record.payload,
  });
}

function targetPaymentFacts(
  id: bigint,
  facts: {
    network: string;
    paymentRef: string | null;
    payer: string | null;
    validBefore: bigint | null;
    lastValidBlockHeight: bigint | null;
    txHash: string | null;
    payload?: unknown;
  },
): SignedTargetPayment {
  const network = canonicalNetwork(facts.network);
  // A network we do not know cannot be read (readPaymentOnChain answers unknown): no reference to place.
  const reference =
    network === undefined ? { nonce: null, payerSignature: null } : familyOf(network).referenceFields(facts.paymentRef);
  return {
    label: `relay transaction ${id}`,
    network: facts.network,
    payer: facts.payer,
    ...reference,
    validBefore: facts.validBefore,
    lastValidBlockHeight: facts.lastValidBlockHeight,
    txHash: facts.txHash,
    payload: facts.payload,
  };
}
