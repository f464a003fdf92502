/**
 * Proxy payment rows (db/migrations/..._proxy_payments). Every money movement of /proxy is a row
 * first and an action second:
 *
 *   reserved  credits held, the row written in the reservation's transaction; nothing signed
 *   signed    the payment exists and may have reached the target: only the chain can tell now
 *   charged   the payment is on chain; the credits are spent
 *   released  the payment never went through (or was never sent); the credits are back
 *
 * Each move is one guarded update (the state it leaves is in the WHERE), taken together with the
 * reservation and the webhook record in one transaction, so a step that runs twice does nothing.
 */
import { sql, type Selectable } from 'kysely';
import type { Db, Tx } from '../../db/index';
import type { ProxyPaymentsTable } from '../../db/schema';
import type { AuthenticatedKey } from '../accounts';
import { chargeReservation, releaseReservation, reserveCredits, type ReservationResult } from '../credits';
import { addJob } from '../jobs';
import { usdcText } from '../money';
import type { SignedTargetPayment } from '../target/index';
import type { PaymentChoice } from '../x402/choose';
import { completeWebhook, openWebhook } from '../webhooks';

export type ProxyPayment = Selectable<ProxyPaymentsTable>;

/** The worker task that resolves a signed payment from the chain (worker/tasks/proxyPaymentWatch.ts). */
export const PROXY_PAYMENT_WATCH_TASK = 'proxy_payment_watch';

export function watchJobKey(id: bigint): string {
  return `${PROXY_PAYMENT_WATCH_TASK}:${id}`;
}

export interface NewProxyPayment {
  /** The payment's idempotency key: on EVM the authorization nonce we then sign with. */
  reference: string;
  key: AuthenticatedKey;
  requestId: string;
  targetUrl: string;
  choice: PaymentChoice;
  credits: bigint;
  day: string;
  accountDailyLimitCredits: bigint;
  systemDailyLimitCredits: bigint;
}

/** Holds the credits and writes the row in one transaction; nothing is written when a limit refuses. */
export async function reserveProxyPayment(db: Db, payment: NewProxyPayment): Promise<ReservationResult> {
  const { key, choice } = payment;
  return reserveCredits(
    db,
    {
      reference: payment.reference,
      organisationId: key.organisationId,
      accountId: key.accountId,
      apiKeyId: key.apiKeyId,
      keyDailyCapCredits: key.dailyCapCredits,
      networkClass: choice.networkClass,
      day: payment.day,
      credits: payment.credits,
      accountDailyLimitCredits: payment.accountDailyLimitCredits,
      systemDailyLimitCredits: payment.systemDailyLimitCredits,
    },
    {
      recordWith: async (tx) => {
        await tx
          .insertInto('proxy_payments')
          .values({
            reference: payment.reference,
            organisation_id: key.organisationId,
            account_id: key.accountId,
            api_key_id: key.apiKeyId,
            request_id: payment.requestId,
            target_url: payment.targetUrl,
            network: choice.network,
            chain_type: choice.chainType,
            pay_to: choice.requirements.payTo,
            amount_micro_usdc: choice.amountMicroUsdc,
            credits: payment.credits,
          })
          .execute();
      },
    },
  );
}

export interface SignedPayment {
  payer: string;
  /** Solana: our signature in the transaction. */
  payerSignature?: string | null;
  /** EVM: validBefore, unix seconds. */
  validBefore?: bigint | null;
  /** Solana: the last block height at which the transaction can land. */
  lastValidBlockHeight?: bigint | null;
}

/** What the chain is read for: the payment as its row records it (on EVM the reference is the authorization nonce). */
export function signedTargetPaymentOf(payment: ProxyPayment): SignedTargetPayment {
  return {
    label: `proxy payment ${payment.id}`,
    network: payment.network,
    chainType: payment.chain_type,
    payer: payment.payer,
    nonce: payment.chain_type === 'evm' ? payment.reference : null,
    payerSignature: payment.payer_signature,
    validBefore: payment.valid_before,
    lastValidBlockHeight: payment.last_valid_block_height,
    txHash: payment.tx_hash,
  };
}

/** Written before X-PAYMENT leaves: from here on only the chain says whether the payment happened. */
export async function recordSigned(db: Db, reference: string, signed: SignedPayment): Promise<boolean> {
  const result = await db
    .updateTable('proxy_payments')
    .set({
      state: 'signed',
      payer: signed.payer,
      payer_signature: signed.payerSignature ?? null,
      valid_before: signed.validBefore ?? null,
      last_valid_block_height: signed.lastValidBlockHeight ?? null,
      signed_at: sql`now()`,
    })
    .where('reference', '=', reference)
    .where('state', '=', 'reserved')
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The payment is on chain: the credits are spent and the record, if any, says success. Once only. */
export async function chargeProxyPayment(db: Db, reference: string, settled: { txHash?: string; outcome: string }): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    const payment = await tx
      .updateTable('proxy_payments')
      .set({ state: 'charged', tx_hash: sql`coalesce(${settled.txHash ?? null}, tx_hash)`, outcome: settled.outcome, settled_at: sql`now()` })
      .where('reference', '=', reference)
      .where('state', '=', 'signed')
      .returningAll()
      .executeTakeFirst();
    if (!payment) return false;
    if (!(await chargeReservation(tx, reference))) throw new Error(`proxy payment ${payment.id}: its reservation was already settled`);
    if (payment.webhook_id) {
      await completeWebhook(tx, payment.webhook_id, {
        status: 'success',
        ...(payment.tx_hash ? { txHash: payment.tx_hash } : {}),
        network: payment.network,
        message: `Payment of ${usdcText(payment.amount_micro_usdc)} to the target confirmed on-chain; ${payment.credits} credits charged`,
      });
    }
    return true;
  });
}

/** The payment never went through: the credits come back and the record, if any, says payment_failed. Once only. */
export async function releaseProxyPayment(db: Db, reference: string, failed: { outcome: string }): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    const payment = await tx
      .updateTable('proxy_payments')
      .set({ state: 'released', outcome: failed.outcome, settled_at: sql`now()` })
      .where('reference', '=', reference)
      .where('state', 'in', ['reserved', 'signed'])
      .returningAll()
      .executeTakeFirst();
    if (!payment) return false;
    if (!(await releaseReservation(tx, reference))) throw new Error(`proxy payment ${payment.id}: its reservation was already settled`);
    if (payment.webhook_id) {
      await completeWebhook(tx, payment.webhook_id, {
        status: 'payment_failed',
        network: payment.network,
        error: `The payment to the target was not settled on-chain: ${failed.outcome}`,
        message: `Nothing was paid; ${payment.credits} reserved credits were released`,
      });
    }
    return true;
  });
}

/**
 * Hands a signed payment to the watch job, in one transaction: the transaction hash the target
 * reported (if any), a webhook record when the client gets its id, and the job itself (its key
 * makes a second enqueue a no-op). Returns the webhook id, or undefined when none was opened.
 */
export async function watchProxyPayment(
  db: Db,
  reference: string,
  { openRecord, reportedTxHash }: { openRecord: boolean; reportedTxHash?: string },
): Promise<{ watching: boolean; webhookId?: string }> {
  return db.transaction().execute(async (tx) => {
    const payment = await tx.selectFrom('proxy_payments').selectAll().where('reference', '=', reference).forUpdate().executeTakeFirst();
    if (!payment || payment.state !== 'signed') return { watching: false, ...(payment?.webhook_id ? { webhookId: payment.webhook_id } : {}) };
    let webhookId = payment.webhook_id ?? undefined;
    if (openRecord && webhookId === undefined) {
      webhookId = await openWebhook(tx, {
        kind: 'proxy_payment',
        network: payment.network,
        message: `Watching the chain for the payment of ${usdcText(payment.amount_micro_usdc)} to the target`,
      });
    }
    await tx
      .updateTable('proxy_payments')
      .set({ webhook_id: webhookId ?? null, tx_hash: payment.tx_hash ?? reportedTxHash ?? null })
      .where('id', '=', payment.id)
      .execute();
    await enqueueWatch(tx, payment.id);
    return { watching: true, ...(webhookId ? { webhookId } : {}) };
  });
}

/**
 * graphile_worker.add_job in the caller's transaction; the job key keeps one job per payment. A
 * job that is running keeps running and a new one is queued behind it; `keepSchedule` leaves a
 * queued job's time alone (the sweeper only makes sure a job exists). Without `runAt`: at once,
 * by the database's clock.
 */
export async function enqueueWatch(db: Db | Tx, id: bigint, runAt: Date = new Date(0), { keepSchedule = false } = {}): Promise<void> {
  await addJob(db, { task: PROXY_PAYMENT_WATCH_TASK, payload: { proxyPaymentId: String(id) }, key: watchJobKey(id), runAt, keepSchedule });
}

export async function findProxyPayment(db: Db, id: bigint): Promise<ProxyPayment | undefined> {
  return db.selectFrom('proxy_payments').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Payments still open (reserved or signed) that were created before `before`, oldest first. */
export async function openPaymentsBefore(db: Db, before: Date, limit: number): Promise<ProxyPayment[]> {
  return db
    .selectFrom('proxy_payments')
    .selectAll()
    .where('state', 'in', ['reserved', 'signed'])
    .where('created_at', '<', before)
    .orderBy('created_at')
    .limit(limit)
    .execute();
}
