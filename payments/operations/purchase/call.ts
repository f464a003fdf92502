/**
 * Credits bought over x402 (POST /v1/credits/purchase). The payment is received as every payment
 * to the service is (payments/incoming/, through the offers of payments/operations/chat/call.ts): verified against
 * our 402, recorded as a relay transaction of mode 'purchase' (its nonce is used once), settled
 * directly or through the facilitator. Its purchase row, written in the same transaction with its
 * webhook record and the watch job, says for whom; the credits are added once, by the guarded move
 * settling -> credited taken with the balance and the ledger entry (kind 'purchase'). A repeat of
 * the same payment finds its row (by the payment's SHA-256) and gets the recorded answer.
 *
 * On the CHANNEL_RECEIVER_NETWORKS networks the 402 also offers `batch-settlement`
 * (payments/operations/chat/channel.ts): a channel payment holds its channel's lease, and the
 * credits, their ledger entry (`purchase:channel:<channel id>:<cumulative>`) and the charge on the
 * channel are written in one database transaction (commitChannelChargeAlong): a crash leaves both or
 * neither, never a credit without a charge or a charge without a credit.
 */
import { sql, type Selectable } from 'kysely';
import type { Db, Tx } from '../../../db/index';
import type { CreditPurchasesTable } from '../../../db/schema';
import type { AuthenticatedKey } from '../../accounts/accounts';
import { receivingOffers, refusedPayment } from '../chat/call';
import type { Deps } from '../../deps';
import { receivedPayment, type ClientPaymentHeader, type DecodedClientPayment } from '../../incoming/clientPayment';
import { reconcileSettlement, settleClientPayment, type SettleFailureReason } from '../../incoming/settle';
import { findRelayTransaction, markDelivered, markSettleFailed, claimClientPayment } from '../../incoming/store';
import { verifyDecodedPayment } from '../../incoming/verify';
import { addJob } from '../../basics/jobs';
import { MICRO_PER_CREDIT } from '../../basics/money';
import { paymentIdentity } from '../relay/retries';
import { completeWebhook, openWebhook } from '../../tracking/webhooks';
import type { PaymentRequirements, SettlementResponse } from '../../x402/types';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import { commitChannelChargeAlong, releaseChannel, type ChargeCommitAlong } from '../../incoming/channels/receive';
import { channelReceipt } from '../../incoming/channels/offers';
import { channelPaymentOf, refusedChannelPayment, sellingChannelOffers, takeChannelPayment } from '../chat/channel';

export type CreditPurchase = Selectable<CreditPurchasesTable>;

/** What the client is told about its purchase, in atomic units; the same for every repeat of the payment. */
export interface PurchaseAnswer {
  status: 'credited' | 'settling';
  credits: bigint;
  amountMicroUsdc: bigint;
  network: string;
  payer: string;
  transaction?: string;
  balanceCredits?: bigint;
  webhookId: string;
  /** The settlement as a receipt (version 1 form), once known. */
  settlement?: SettlementResponse;
}

export type PurchaseOutcome =
  | {
      kind: 'payment_required';
      accepts: PaymentRequirements[];
      error: string;
      reason?: SettleFailureReason;
      /** The batch-settlement entries offered first in PAYMENT-REQUIRED (corrected with our channel state). */
      channelAccepts?: PaymentRequirementsV2[];
    }
  | { kind: 'payment_reused'; details: string }
  | { kind: 'verification_unavailable'; details: string }
  | { kind: 'answered'; answer: PurchaseAnswer; replayed: boolean };

/** A watch job first looks at a purchase left settling this long after it was recorded. */
const PURCHASE_WATCH_DELAY_MS = 5_000;

function purchasePriceMicroUsdc(credits: bigint): bigint {
  return credits * MICRO_PER_CREDIT;
}

type PurchaseDeps = Pick<Deps, 'db' | 'config' | 'chains' | 'clock' | 'submissions' | 'paymentBounds' | 'log'>;

interface PurchaseRequest {
  key: AuthenticatedKey;
  credits: bigint;
  payment: ClientPaymentHeader | undefined;
  resource: string;
}

export async function buyCredits(deps: PurchaseDeps, request: PurchaseRequest): Promise<PurchaseOutcome> {
  const { db } = deps;
  const amountMicroUsdc = purchasePriceMicroUsdc(request.credits);
  const accepts = await receivingOffers(deps, {
    resource: request.resource,
    description: `Purchase of ${request.credits} credits`,
    amountMicroUsdc,
  });
  const channelAccepts = sellingChannelOffers(deps, accepts, amountMicroUsdc);
  if (request.payment === undefined || request.payment.value === '')
    return { kind: 'payment_required', accepts, error: 'Payment Required', channelAccepts };
  const received = receivedPayment(request.payment);
  if (!received.decoded.ok)
    return { kind: 'payment_required', accepts, error: received.decoded.details, reason: 'invalid_header' };
  const channelPayment = channelPaymentOf(received.decoded.value);
  if (channelPayment)
    return channelPurchase(deps, request, { accepts, channelAccepts, payment: channelPayment, amountMicroUsdc });
  const paymentId = purchasePaymentId(received.decoded.value);
  const earlier = await recordedAnswer(db, paymentId, request.key);
  if (earlier) return earlier;

  const verified = await verifyDecodedPayment(received.decoded.value, accepts, deps);
  if (!verified.ok) return refusedPayment(verified, accepts);
  const recorded = await db.transaction().execute(async (tx) => {
    const row = await claimClientPayment(tx, verified.value, {
      targetUrl: request.resource,
      targetMethod: 'POST',
      mode: 'purchase',
    });
    if (!row.ok) return undefined;
    const webhookId = await openWebhook(tx, {
      kind: 'credit_purchase',
      network: verified.value.network,
      message: `The payment for ${request.credits} credits is being settled`,
      relayTxId: row.value.id,
    });
    const purchase = await tx
      .insertInto('credit_purchases')
      .values({
        payment_id: paymentId,
        relay_transaction_id: row.value.id,
        organisation_id: request.key.organisationId,
        api_key_id: request.key.apiKeyId,
        credits: request.credits,
        webhook_id: webhookId,
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    // Finishes the purchase if this request stops before it does.
    await addJob(tx, {
      task: 'credit_purchase_watch',
      payload: { creditPurchaseId: String(purchase.id) },
      key: `credit_purchase_watch:${purchase.id}`,
      runAt: new Date(deps.clock.now().getTime() + PURCHASE_WATCH_DELAY_MS),
    });
    return purchase;
  });
  // The same payment, recorded a moment ago by a concurrent request.
  if (recorded === undefined)
    return (
      (await recordedAnswer(db, paymentId, request.key)) ?? {
        kind: 'payment_reused',
        details: 'this payment was already used',
      }
    );

  const settlement = await settleClientPayment(db, recorded.relay_transaction_id, deps, { verifiedJustNow: true });
  if (settlement.kind === 'failed') {
    await failPurchase(db, recorded, settlement.reason, settlement.details);
    return {
      kind: 'payment_required',
      accepts,
      error: `${settlement.reason}: ${settlement.details}`,
      reason: settlement.reason,
    };
  }
  if (settlement.kind === 'settled') await creditPurchase(db, recorded.id, settlement.txHash);
  return (await recordedAnswer(db, paymentId, request.key, false)) ?? unreachablePurchase(recorded.id);
}

/** How long a purchase may hold its channel: crediting is a database transaction. */
const PURCHASE_CHANNEL_LEASE_MS = 30_000;

type ChannelRefused = Exclude<Awaited<ReturnType<typeof takeChannelPayment>>, { kind: 'reserved' }>;

/**
 * Credits bought through a channel: under the channel's lease, the credits and the charge are
 * committed together; nothing else can fail after them. No credit_purchases row (it names a relay
 * transaction): the ledger entry and a webhook record, ended at once, are the purchase's records.
 */
async function channelPurchase(
  deps: PurchaseDeps,
  request: PurchaseRequest,
  {
    accepts,
    channelAccepts,
    payment,
    amountMicroUsdc,
  }: {
    accepts: PaymentRequirements[];
    channelAccepts: PaymentRequirementsV2[];
    payment: NonNullable<ReturnType<typeof channelPaymentOf>>;
    amountMicroUsdc: bigint;
  },
): Promise<PurchaseOutcome> {
  const refusedWith = (refused: ChannelRefused): PurchaseOutcome =>
    refused.kind === 'unavailable'
      ? { kind: 'verification_unavailable', details: refused.details }
      : {
          kind: 'payment_required',
          accepts,
          error: refused.error,
          reason: refused.reason,
          channelAccepts: refused.offers,
        };
  const taken = await takeChannelPayment(deps, payment, channelAccepts, { leaseMs: PURCHASE_CHANNEL_LEASE_MS });
  if (taken.kind !== 'reserved') return refusedWith(taken);
  const { reservation } = taken;
  const { key, credits } = request;
  const deposit = reservation.deposit;
  let committed: ChargeCommitAlong<{ balance: bigint; webhookId: string }>;
  try {
    committed = await commitChannelChargeAlong(deps, reservation, {
      reference: request.resource,
      along: (tx, charge) =>
        creditChannelPurchase(tx, {
          key,
          credits,
          network: reservation.network,
          reference: `purchase:channel:${reservation.channelId}:${charge.cumulative}`,
          ...(deposit ? { txHash: deposit.txHash } : {}),
        }),
    });
  } catch (error) {
    await releaseChannel(deps, reservation.channelId, reservation.pendingId).catch(() => undefined);
    throw error;
  }
  if (!committed.ok) return refusedWith(refusedChannelPayment(committed.refusal, channelAccepts));
  return {
    kind: 'answered',
    replayed: false,
    answer: {
      status: 'credited',
      credits,
      amountMicroUsdc,
      network: reservation.network,
      payer: reservation.payer,
      ...(deposit ? { transaction: deposit.txHash } : {}),
      balanceCredits: committed.value.balance,
      webhookId: committed.value.webhookId,
      settlement: channelReceipt(reservation, committed),
    },
  };
}

/** The credits of a channel purchase, in the transaction of its charge: balance, ledger entry, record. */
async function creditChannelPurchase(
  tx: Tx,
  purchase: { key: AuthenticatedKey; credits: bigint; network: string; reference: string; txHash?: string },
): Promise<{ balance: bigint; webhookId: string }> {
  const organisation = await tx
    .updateTable('organisations')
    .set({ credit_balance: sql<bigint>`credit_balance + ${purchase.credits}` })
    .where('id', '=', purchase.key.organisationId)
    .returning('credit_balance')
    .executeTakeFirstOrThrow();
  await tx
    .insertInto('credit_ledger')
    .values({
      organisation_id: purchase.key.organisationId,
      api_key_id: purchase.key.apiKeyId,
      kind: 'purchase',
      amount_credits: purchase.credits,
      reference: purchase.reference,
    })
    .execute();
  const webhookId = await openWebhook(tx, {
    kind: 'credit_purchase',
    network: purchase.network,
    message: `The payment for ${purchase.credits} credits is charged on the payer's channel`,
  });
  await completeWebhook(tx, webhookId, {
    status: 'success',
    ...(purchase.txHash ? { txHash: purchase.txHash } : {}),
    message: `${purchase.credits} credits were added`,
  });
  return { balance: organisation.credit_balance, webhookId };
}

function unreachablePurchase(id: bigint): never {
  throw new Error(`credit purchase ${id} vanished`);
}

/** The payment's identity: the SHA-256 of its payload (the same payment in either header is one payment). */
function purchasePaymentId(payment: DecodedClientPayment): string {
  return paymentIdentity(payment);
}

/** The answer a purchase gives now, or undefined when this payment bought nothing yet. */
async function recordedAnswer(
  db: Db,
  paymentId: string,
  key: AuthenticatedKey,
  replayed = true,
): Promise<PurchaseOutcome | undefined> {
  const row = await db
    .selectFrom('credit_purchases')
    .innerJoin('relay_transactions', 'relay_transactions.id', 'credit_purchases.relay_transaction_id')
    .select([
      'credit_purchases.state',
      'credit_purchases.organisation_id',
      'credit_purchases.credits',
      'credit_purchases.webhook_id',
      'credit_purchases.balance_after',
      'credit_purchases.failure',
      'relay_transactions.network',
      'relay_transactions.payer',
      'relay_transactions.amount_micro',
      'relay_transactions.client_tx_hash',
    ])
    .where('credit_purchases.payment_id', '=', paymentId)
    .executeTakeFirst();
  if (!row) return undefined;
  if (row.organisation_id !== key.organisationId || row.state === 'failed')
    return {
      kind: 'payment_reused',
      details: `this payment was already used${row.failure ? ` (${row.failure})` : ''}`,
    };
  const transaction = row.client_tx_hash ?? undefined;
  return {
    kind: 'answered',
    replayed,
    answer: {
      status: row.state,
      credits: row.credits,
      amountMicroUsdc: row.amount_micro,
      network: row.network,
      payer: row.payer,
      ...(transaction ? { transaction } : {}),
      ...(row.balance_after === null ? {} : { balanceCredits: row.balance_after }),
      webhookId: row.webhook_id,
      ...(transaction
        ? { settlement: { success: row.state === 'credited', transaction, network: row.network, payer: row.payer } }
        : {}),
    },
  };
}

/**
 * The payment settled: the credits are added once. The guarded move settling -> credited, the
 * balance, the ledger entry, the webhook record and the relay transaction's delivery are one
 * transaction; a second call finds nothing to move. Returns whether this call added them.
 */
async function creditPurchase(db: Db, purchaseId: bigint, txHash: string): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    const purchase = await tx
      .selectFrom('credit_purchases')
      .selectAll()
      .where('id', '=', purchaseId)
      .where('state', '=', 'settling')
      .forUpdate()
      .executeTakeFirst();
    if (!purchase) return false;
    const organisation = await tx
      .updateTable('organisations')
      .set({ credit_balance: sql<bigint>`credit_balance + ${purchase.credits}` })
      .where('id', '=', purchase.organisation_id)
      .returning('credit_balance')
      .executeTakeFirstOrThrow();
    await tx
      .updateTable('credit_purchases')
      .set({ state: 'credited', balance_after: organisation.credit_balance, finished_at: sql`now()` })
      .where('id', '=', purchaseId)
      .execute();
    await tx
      .insertInto('credit_ledger')
      .values({
        organisation_id: purchase.organisation_id,
        api_key_id: purchase.api_key_id,
        kind: 'purchase',
        amount_credits: purchase.credits,
        reference: `purchase:${purchase.id}:${txHash}`,
      })
      .execute();
    await completeWebhook(tx, purchase.webhook_id, {
      status: 'success',
      txHash,
      message: `${purchase.credits} credits were added`,
    });
    await markDelivered(tx, purchase.relay_transaction_id);
    return true;
  });
}

async function failPurchase(db: Db | Tx, purchase: CreditPurchase, reason: string, details: string): Promise<void> {
  await db.transaction().execute(async (tx) => {
    const moved = await tx
      .updateTable('credit_purchases')
      .set({ state: 'failed', failure: `${reason}: ${details}`.slice(0, 2000), finished_at: sql`now()` })
      .where('id', '=', purchase.id)
      .where('state', '=', 'settling')
      .executeTakeFirst();
    if (moved.numUpdatedRows === 0n) return;
    await completeWebhook(tx, purchase.webhook_id, {
      status: 'payment_failed',
      message: 'The payment did not settle; no credits were added',
      error: `${reason}: ${details}`.slice(0, 500),
    });
    await markSettleFailed(tx, purchase.relay_transaction_id, reason, details);
  });
}

export type PurchaseFollowUp = 'credited' | 'failed' | 'still_settling' | 'finished';

/** The watch job's step: settle or read the chain, then credit or fail. Safe to repeat. */
export async function followUpPurchase(
  deps: Pick<Deps, 'db' | 'config' | 'chains' | 'clock' | 'submissions' | 'paymentBounds'>,
  purchaseId: bigint,
): Promise<PurchaseFollowUp> {
  const { db } = deps;
  const purchase = await db.selectFrom('credit_purchases').selectAll().where('id', '=', purchaseId).executeTakeFirst();
  if (!purchase || purchase.state !== 'settling') return 'finished';
  const row = await findRelayTransaction(db, purchase.relay_transaction_id);
  const outcome =
    row?.state === 'received'
      ? await settleClientPayment(db, purchase.relay_transaction_id, deps)
      : await reconcileSettlement(db, purchase.relay_transaction_id, deps);
  if (outcome.kind === 'settled') {
    await creditPurchase(db, purchase.id, outcome.txHash);
    return 'credited';
  }
  if (outcome.kind === 'pending') return 'still_settling';
  await failPurchase(db, purchase, outcome.reason, outcome.details);
  return 'failed';
}
