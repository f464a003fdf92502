/**
 * Proxy payment rows (db/migrations/..._proxy_payments). Every money movement of /proxy is a row
 * first and an action second. The states and their moves are the table PROXY_MOVES (./states.ts,
 * with its diagram); every move is one guarded update through moveProxyPayment (the state it
 * leaves is in the WHERE), taken together with the credits the row holds and the webhook record
 * in one transaction, so a step that runs twice does nothing.
 */
import { sql, type RawBuilder, type Selectable } from 'kysely';
import type { Db, Tx } from '../../../db/index';
import { firstRow } from '../../../db/rows';
import { runPrepared } from '../../../db/prepared';
import type { ProxyPaymentsTable, ProxyScheme } from '../../../db/schema';
import type { AuthenticatedKey } from '../../accounts/accounts';
import {
  reservationResultOf,
  reserveCreditsCall,
  type ReservationRefused,
  type ReservationRow,
} from '../../accounts/credits';
import { ok, type Ok } from '../../basics/result';
import { addJob, type JobName } from '../../basics/jobs';
import { CREDITS_PER_USDC, usdcText } from '../../basics/money';
import { utcDay } from '../../basics/clock';
import type { Config } from '../../basics/config';
import { FAMILIES } from '../../chains/registry';
import { settledMicroUsdc, type SignedTargetPayment } from '../../outgoing/index';
import { isChannel, isUpto, type PaymentChoice } from '../../x402/choose';
import { uptoProxyCharge } from '../../accounts/fees';
import type { ChainReading } from '../../chains/types';
import type { SignedPaymentPayload } from '../../x402/types';
import { openWebhook } from '../../tracking/webhooks';
import { moveProxyPayment } from './states';
import { holdIdempotencyClaim, type ClaimRef } from '../../basics/idempotency';

export type ProxyPayment = Selectable<ProxyPaymentsTable>;

/** The key of the job that resolves a signed payment from the chain (worker/tasks/proxyPaymentWatch.ts). */
function watchJobKey(id: bigint): string {
  return `${'proxy_payment_watch' satisfies JobName}:${id}`;
}

export interface NewProxyPayment {
  /** The payment's idempotency key: on EVM the authorization nonce we then sign with. */
  reference: string;
  key: AuthenticatedKey;
  requestId: string;
  /** The idempotency record's claim the call runs under: held while the row is written, and kept on it. */
  idempotency?: ClaimRef;
  targetUrl: string;
  choice: PaymentChoice;
  credits: bigint;
  day: string;
  accountDailyLimitCredits: bigint;
  systemDailyLimitCredits: bigint;
}

export type ProxyReservation = Ok<{ id: bigint }> | ReservationRefused;

/** The row of a /proxy call's payment: its caller, its target, its choice and the credits it holds, on today's counters. */
export function newProxyPayment(
  config: Pick<Config, 'proxyDailyPerAccountUsd' | 'proxyDailyTotalUsd'>,
  now: Date,
  input: { call: { api_url: string }; key: AuthenticatedKey; requestId: string; idempotency?: ClaimRef },
  payment: { reference: string; choice: PaymentChoice; credits: bigint },
): NewProxyPayment {
  return {
    ...payment,
    key: input.key,
    requestId: input.requestId,
    ...(input.idempotency ? { idempotency: input.idempotency } : {}),
    targetUrl: input.call.api_url,
    day: utcDay(now),
    accountDailyLimitCredits: BigInt(config.proxyDailyPerAccountUsd) * CREDITS_PER_USDC,
    systemDailyLimitCredits: BigInt(config.proxyDailyTotalUsd) * CREDITS_PER_USDC,
  };
}

/**
 * Holds the credits and writes the row in one statement (so one transaction and one round trip):
 * reserve_credits in a CTE, the row only when it reserved. The row is the reservation: it keeps
 * the network class and the day of the daily counters the credits were counted on, so a release
 * gives them back where they were taken. Nothing is written when a limit refuses. Returns the
 * row's id with the reservation.
 *
 * With `signed` (the payment was signed beforehand, and has not left this process) the row is
 * written as "signed" with what the chain will be read for: reserved -> signed in the same
 * statement, so the payment may leave once this returns.
 */
export async function holdProxyPayment(
  db: Db,
  payment: NewProxyPayment,
  signed?: SignedFacts,
): Promise<ProxyReservation> {
  const hold = holdStatementParts(payment, signed);
  const statement = sql<HeldColumns>`with ${hold.ctes} select ${hold.columns}`;
  const { idempotency } = payment;
  // Under an idempotency record the claim is held first: money is recorded only while it is the record's.
  // Named: the statement is parsed and planned once per connection, not on every call.
  const { rows } = idempotency
    ? await db.transaction().execute(async (tx) => {
        await holdIdempotencyClaim(tx, idempotency);
        return runPrepared(tx, statement.compile(tx));
      })
    : await runPrepared(db, statement.compile(db));
  return heldOf(firstRow(rows, `proxy payment ${payment.reference}: reserve_credits`), payment.reference);
}

/** The columns the hold's statement reads back: the reservation's, and the row's id when written. */
interface HeldColumns {
  hold_reserved: boolean;
  hold_reason: ReservationRow['reason'];
  hold_spent_credits: bigint | null;
  hold_limit_credits: bigint | null;
  hold_balance_credits: bigint | null;
  hold_id: bigint | null;
}

/**
 * The hold as parts of a statement: its common table expressions (held: reserve_credits; payment:
 * the row, only when it reserved), whether it held (an SQL boolean) and the columns read back.
 * holdProxyPayment runs them alone; a channel payment runs them in the statement that records its
 * voucher (payments/outgoing/channels.ts), so that the voucher is written only with its hold.
 */
export function holdStatementParts(
  payment: NewProxyPayment,
  signed?: SignedFacts,
): { ctes: RawBuilder<unknown>; admits: RawBuilder<boolean>; columns: RawBuilder<unknown> } {
  const { key, choice } = payment;
  const reservation = reserveCreditsCall({
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
  });
  const { idempotency } = payment;
  // upto and channels: the maximum and the credits held for it are kept beside what the charge will write.
  const scheme = proxySchemeOf(choice);
  const upto = scheme !== 'exact';
  return {
    ctes: sql`
    held as (select * from ${reservation}),
    payment as (
      insert into proxy_payments
        (reference, organisation_id, account_id, api_key_id, request_id, target_url, network, chain_type, pay_to, amount_micro_usdc, credits,
         scheme, max_amount_micro_usdc, reserved_credits, network_class, spend_day,
         idempotency_claim, state, payer, payer_signature, valid_before, last_valid_block_height, signed_at, payment_payload)
      select
        ${payment.reference}::text, ${key.organisationId}::bigint, ${key.accountId}::bigint, ${key.apiKeyId}::bigint,
        ${payment.requestId}::text, ${payment.targetUrl}::text, ${choice.network}::text, ${choice.chainType}::text,
        ${choice.requirements.payTo}::text, ${choice.amountMicroUsdc}::bigint, ${payment.credits}::bigint,
        ${scheme}::text, ${upto ? choice.amountMicroUsdc : null}::bigint, ${upto ? payment.credits : null}::bigint,
        ${choice.networkClass}::text, ${payment.day}::date,
        ${idempotency?.claim ?? null}::uuid,
        ${signed ? 'signed' : 'reserved'}::text, ${signed?.payer ?? null}::text, ${signed?.payerSignature ?? null}::text,
        ${signed?.validBefore ?? null}::bigint, ${signed?.lastValidBlockHeight ?? null}::bigint,
        ${signed ? sql`now()` : sql`null`}, ${signed?.payload ? JSON.stringify(signed.payload) : null}::jsonb
      from held where held.reserved
      returning id
    )`,
    admits: sql<boolean>`exists (select 1 from payment)`,
    columns: sql`
      (select reserved from held) as hold_reserved, (select reason from held) as hold_reason,
      (select spent_credits from held) as hold_spent_credits, (select limit_credits from held) as hold_limit_credits,
      (select balance_credits from held) as hold_balance_credits, (select id from payment) as hold_id`,
  };
}

/** The hold's outcome from the columns its statement read back. */
export function heldOf(columns: Partial<HeldColumns>, reference: string): ProxyReservation {
  const result = reservationResultOf({
    reserved: columns.hold_reserved === true,
    reason: columns.hold_reason ?? null,
    spent_credits: columns.hold_spent_credits ?? null,
    limit_credits: columns.hold_limit_credits ?? null,
    balance_credits: columns.hold_balance_credits ?? null,
  });
  if (!result.ok) return result;
  if (columns.hold_id === null || columns.hold_id === undefined)
    throw new Error(`proxy payment ${reference}: reserved, but no row was written`);
  return ok({ id: columns.hold_id });
}

/** The row's scheme for a choice: a channel payment is held and charged as upto is. */
export function proxySchemeOf(choice: PaymentChoice): ProxyScheme {
  return isUpto(choice) ? 'upto' : isChannel(choice) ? 'batch-settlement' : 'exact';
}

/** What was signed, as a proxy payment row stores it so the chain can be read for it later. */
export interface SignedFacts {
  payer: string;
  /** The signed payment itself, kept to send it again if a reorg drops its settlement. */
  payload?: SignedPaymentPayload;
  /** Solana: our signature in the transaction. */
  payerSignature?: string | null;
  /** EVM: validBefore, unix seconds. */
  validBefore?: bigint | null;
  /** Solana: the last block height at which the transaction can land. */
  lastValidBlockHeight?: bigint | null;
}

/** The fields of a proxy payment row that say what the chain is read for. */
export type SignedRecord = Pick<
  ProxyPayment,
  | 'id'
  | 'reference'
  | 'network'
  | 'chain_type'
  | 'payer'
  | 'payer_signature'
  | 'valid_before'
  | 'last_valid_block_height'
  | 'tx_hash'
  | 'payment_payload'
  | 'scheme'
  | 'reserved_credits'
>;

/**
 * The row's fields as holdProxyPayment wrote them with the signed facts, without reading the row
 * back: network and chain from the choice, the signed facts as stored, no transaction hash yet
 * (only watchProxyPayment and the charge write one).
 */
export function signedRecordOf(
  id: bigint,
  reference: string,
  choice: PaymentChoice,
  signed: SignedFacts,
  /** The credits held: kept for an upto payment, whose charge releases what the target did not use. */
  credits?: bigint,
): SignedRecord {
  return {
    id,
    reference,
    network: choice.network,
    chain_type: choice.chainType,
    payer: signed.payer,
    payer_signature: signed.payerSignature ?? null,
    valid_before: signed.validBefore ?? null,
    last_valid_block_height: signed.lastValidBlockHeight ?? null,
    tx_hash: null,
    payment_payload: signed.payload ?? null,
    scheme: proxySchemeOf(choice),
    reserved_credits: proxySchemeOf(choice) === 'exact' ? null : (credits ?? null),
  };
}

/** What the chain is read for: the payment as its row records it (on EVM the reference is the authorization nonce). */
export function signedTargetPaymentOf(payment: SignedRecord): SignedTargetPayment {
  return {
    label: `proxy payment ${payment.id}`,
    network: payment.network,
    payer: payment.payer,
    nonce: FAMILIES[payment.chain_type].referenceFields(payment.reference).nonce,
    payerSignature: payment.payer_signature,
    validBefore: payment.valid_before,
    lastValidBlockHeight: payment.last_valid_block_height,
    txHash: payment.tx_hash,
    payload: payment.payment_payload,
  };
}

/**
 * The payment is on chain: the credits are spent and the record, if any, says success. Once only:
 * one statement, the database function charge_proxy_payment (a guarded update from signed, its
 * charge in the ledger, the webhook record completed, in one transaction).
 */
export async function chargeProxyPayment(
  db: Db,
  reference: string,
  settled: { txHash?: string; outcome: string; used?: { amountMicroUsdc: bigint; credits: bigint } },
): Promise<boolean> {
  return moveProxyPayment(db, reference, {
    to: 'charged',
    txHash: settled.txHash ?? null,
    outcome: settled.outcome,
    ...(settled.used ? { used: settled.used } : {}),
  });
}

/**
 * What a settled reading means for a signed payment: exact, the whole reservation; upto, what the
 * chain shows the target settled (in micro-USDC, a fraction of a micro-unit dropped in the
 * client's favour) plus the fee on it, the rest of the reservation released. An upto reading
 * without the settled amount, or one whose transaction is unknown, decides nothing: the payment
 * stays held until the chain says how much moved (never the maximum for an unknown outcome).
 */
export function chargeOf(
  payment: Pick<SignedRecord, 'network' | 'scheme' | 'reserved_credits'>,
  reading: Extract<ChainReading, { state: 'settled' }>,
  proxyFeePercent: number,
):
  | { kind: 'charge'; used?: { amountMicroUsdc: bigint; credits: bigint; releasedCredits: bigint } }
  | { kind: 'amount_unknown'; details: string }
  | { kind: 'nothing_to_charge'; details: string } {
  if (payment.scheme !== 'upto') return { kind: 'charge' };
  const settled = settledMicroUsdc(payment.network, reading);
  if (settled === undefined)
    return { kind: 'amount_unknown', details: `settled, but what moved is not known yet: ${reading.details}` };
  if (payment.reserved_credits === null) throw new Error(`upto payment on ${payment.network} without reserved credits`);
  const usedMicro = settled.usedMicro;
  // Dust: a fraction of a micro-USDC (an 18-decimal token) is nothing in micro-USDC, and is charged nothing.
  if (usedMicro <= 0n)
    return {
      kind: 'nothing_to_charge',
      details: `the target settled ${settled.amount} atomic units in ${settled.txHash}, less than a micro-USDC: nothing is charged`,
    };
  const { chargedCredits, releasedCredits } = uptoProxyCharge(usedMicro, payment.reserved_credits, proxyFeePercent);
  return { kind: 'charge', used: { amountMicroUsdc: usedMicro, credits: chargedCredits, releasedCredits } };
}

/**
 * The payment never went through: the credits come back and the record, if any, says
 * payment_failed. Once only: one statement, the database function release_proxy_payment.
 */
export async function releaseProxyPayment(db: Db, reference: string, failed: { outcome: string }): Promise<boolean> {
  return moveProxyPayment(db, reference, { to: 'released', outcome: failed.outcome });
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
    const payment = await tx
      .selectFrom('proxy_payments')
      .selectAll()
      .where('reference', '=', reference)
      .forUpdate()
      .executeTakeFirst();
    if (!payment || payment.state !== 'signed')
      return { watching: false, ...(payment?.webhook_id ? { webhookId: payment.webhook_id } : {}) };
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
export async function enqueueWatch(
  db: Db | Tx,
  id: bigint,
  runAt: Date = new Date(0),
  { keepSchedule = false } = {},
): Promise<void> {
  await addJob(db, {
    task: 'proxy_payment_watch',
    payload: { proxyPaymentId: String(id) },
    key: watchJobKey(id),
    runAt,
    keepSchedule,
  });
}

export async function findProxyPayment(db: Db, id: bigint): Promise<ProxyPayment | undefined> {
  return db.selectFrom('proxy_payments').selectAll().where('id', '=', id).executeTakeFirst();
}

/**
 * Payments still open that the sweep hands to the watch job, oldest first: reserved or signed ones
 * created before `before`, and signed ones whose authorization expired before `expiredBefore`
 * (unix seconds): the chain has decided those (on chain, or never), so they need not wait for the
 * first bound (their request may have failed before it could hand them to the watch job, as when
 * the database dropped its connections).
 */
export async function openPaymentsToWatch(
  db: Db,
  { before, expiredBefore }: { before: Date; expiredBefore: bigint },
  limit: number,
): Promise<ProxyPayment[]> {
  return db
    .selectFrom('proxy_payments')
    .selectAll()
    .where('state', 'in', ['reserved', 'signed'])
    .where((eb) =>
      eb.or([
        eb('created_at', '<', before),
        eb.and([eb('state', '=', 'signed'), eb('valid_before', '<', expiredBefore)]),
      ]),
    )
    .orderBy('created_at')
    .limit(limit)
    .execute();
}
