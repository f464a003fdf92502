/**
 * relay_transactions and refunds: the rows that say what will be done before it is done.
 *
 * The moves of a relay transaction are the table RELAY_MOVES (./states.ts, with its diagram); the
 * functions below name each move and write it through moveRelayTransaction, a guarded update from
 * the states the table allows, so two workers can never both make it and a crash between two
 * steps leaves a row a job finishes.
 *
 * settling with a client_tx_hash: broadcast, outcome unknown (reconcileSettlement reads the chain).
 */
import { sql, type Selectable } from 'kysely';
import type { Db, Tx } from '../../db/index';
import type { RefundsTable, RelayTransactionState, RelayTransactionsTable, SettlementMethod } from '../../db/schema';
import { subtractSpend, SYSTEM_SCOPE_ID } from '../accounts/limits';
import { canonicalNetwork, NETWORK_TABLE } from '../basics/networkTable';
import type { PaymentPayload, PaymentRequirements, SignedPaymentPayload } from '../x402/types';
import { fail, ok, type Result } from '../basics/result';
import { fromStates } from '../basics/states';
import { runPrepared } from '../../db/prepared';
import {
  moveRelayTransaction,
  moveRelayTransactionFor,
  RELAY_MOVES,
  relayTransactionMoved,
  updateRelayTransactionIn,
  type RelayFields,
} from './states';
import type { VerifiedClientPayment } from './types';

export type RelayTransaction = Selectable<RelayTransactionsTable>;
export type Refund = Selectable<RefundsTable>;

/** What the relay was asked to do with the money; the target's own payment is filled in later. */
export interface RelayRequest {
  targetUrl?: string;
  targetMethod?: string;
  targetNetwork?: string;
  targetAmountMicroUsdc?: bigint;
  /** The UTC day the payment is counted against the daily relay limits (in the same transaction). */
  spendDay?: string;
  /** The endpoint taking the payment; 'relay' rows are finished by the relay's jobs. */
  mode?: 'relay' | 'chat' | 'purchase';
  /** The claim of the idempotency record the call runs under (payments/basics/idempotency.ts). */
  idempotencyClaim?: string;
}

/** Runs `work` in the caller's transaction, or in a new one. */
export function inTransaction<T>(db: Db | Tx, work: (tx: Tx) => Promise<T>): Promise<T> {
  return db.isTransaction ? work(db as Tx) : db.transaction().execute(work);
}

/**
 * Claims an accepted payment's nonce: its relay transaction is recorded. A second payment with the
 * same idempotency key is refused by the unique index (also when both arrive at once: the second
 * insert waits for the first and then does nothing), before anything is settled. Returns the new
 * row's id only (a named prepared statement: a paid call needs nothing else of it). Takes a
 * transaction when the caller records more with it.
 */
export async function claimClientPayment(
  db: Db | Tx,
  verified: VerifiedClientPayment,
  request: RelayRequest = {},
): Promise<Result<{ id: bigint }, 'nonce_already_used'>> {
  const { network, asset, nonceKey } = verified.idempotencyKey;
  const query = db
    .insertInto('relay_transactions')
    .values({
      network,
      chain_type: verified.chainType,
      asset,
      payer: verified.payer,
      pay_to: verified.payTo,
      amount_micro: verified.amountMicroUsdc,
      nonce_key: nonceKey,
      payment_payload: JSON.stringify(verified.payment),
      payment_requirements: JSON.stringify(verified.requirements),
      valid_before: verified.validBefore ?? null,
      target_url: request.targetUrl ?? null,
      target_method: request.targetMethod ?? null,
      target_network: request.targetNetwork ?? null,
      target_amount_micro: request.targetAmountMicroUsdc ?? null,
      spend_day: request.spendDay ?? null,
      mode: request.mode ?? null,
      idempotency_claim: request.idempotencyClaim ?? null,
    })
    .onConflict((conflict) => conflict.columns(['network', 'asset', 'nonce_key']).doNothing())
    .returning('id');
  const { rows } = await runPrepared(db, query.compile());
  const row = rows[0];
  if (!row) return fail('nonce_already_used', `this payment (${network}, ${nonceKey}) was already used`);
  return ok(row);
}

/** claimClientPayment, then the whole row as recorded (for a caller that reads it). */
export async function recordClientPayment(
  db: Db | Tx,
  verified: VerifiedClientPayment,
  request: RelayRequest = {},
): Promise<Result<RelayTransaction, 'nonce_already_used'>> {
  const claimed = await claimClientPayment(db, verified, request);
  if (!claimed.ok) return claimed;
  return ok(await getRelayTransaction(db, claimed.value.id));
}

export async function findRelayTransaction(db: Db | Tx, id: bigint): Promise<RelayTransaction | undefined> {
  return db.selectFrom('relay_transactions').selectAll().where('id', '=', id).executeTakeFirst();
}

/** A row known to exist (read or written earlier): relay transactions are never deleted, so its absence is a bug. */
export async function getRelayTransaction(db: Db | Tx, id: bigint): Promise<RelayTransaction> {
  const row = await findRelayTransaction(db, id);
  if (!row) throw new Error(`relay transaction ${id} is missing`);
  return row;
}

export function storedPayment(row: Pick<RelayTransaction, 'payment_payload' | 'payment_requirements'>): {
  payment: PaymentPayload;
  requirements: PaymentRequirements;
} {
  return {
    payment: row.payment_payload as PaymentPayload,
    requirements: row.payment_requirements as PaymentRequirements,
  };
}

/** What settling a client's payment reads of its row (payments/incoming/settle.ts). */
export const SETTLING_COLUMNS = [
  'id',
  'network',
  'asset',
  'payment_payload',
  'payment_requirements',
  'client_tx_hash',
  'client_raw_tx',
  'settle_method',
  'created_at',
] as const;
export type SettlingRow = Pick<RelayTransaction, (typeof SETTLING_COLUMNS)[number]>;

/** received -> settling: only one caller wins the right to settle; the row as settling reads it. */
export function claimSettlement(db: Db | Tx, id: bigint, method: SettlementMethod): Promise<SettlingRow | undefined> {
  return moveRelayTransactionFor(db, id, 'settling', SETTLING_COLUMNS, { settle_method: method });
}

/**
 * The hash of our settling transaction (and, when we sign it, its signed bytes), stored before it
 * is broadcast; false if the row moved on.
 */
export function storeClientTxHash(db: Db | Tx, id: bigint, hash: string, raw?: string): Promise<boolean> {
  return updateRelayTransactionIn(
    db,
    id,
    ['settling'],
    { client_tx_hash: hash, client_raw_tx: raw ?? null },
    { clientTxHashIsNull: true },
  );
}

/**
 * A broadcast the node refused for its nonce (another sender of our key took it: the transaction
 * can never be mined) is replaced by the one signed again; false if the row moved on or names
 * another transaction.
 */
export async function replaceClientTxHash(
  db: Db | Tx,
  id: bigint,
  refused: string,
  signed: { hash: string; raw: string },
): Promise<boolean> {
  const row = await db
    .updateTable('relay_transactions')
    .set({ client_tx_hash: signed.hash, client_raw_tx: signed.raw, updated_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('state', '=', 'settling')
    .where('client_tx_hash', '=', refused)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** settling -> settled, with `fields` in the same write when given; false if the row moved on. */
export function markSettled(db: Db | Tx, id: bigint, hash: string, fields: RelayFields = {}): Promise<boolean> {
  return relayTransactionMoved(db, id, 'settled', { ...fields, client_tx_hash: hash, settled_at: sql<Date>`now()` });
}

/**
 * Nothing moved, and nothing can move any more under this payment. The amount it was counted
 * against the daily relay limits with is taken back in the same transaction, once.
 */
export function markSettleFailed(
  db: Db | Tx,
  id: bigint,
  reason: string,
  details: string,
  /** keepSpend: the call was made and paid for by us (an upto charge lost): it stays counted against the limits. */
  { keepSpend = false }: { keepSpend?: boolean } = {},
) {
  return inTransaction(db, async (tx) => {
    const row = await moveRelayTransaction(tx, id, 'settle_failed', {
      failure_reason: reason,
      failure_details: details.slice(0, 2000),
    });
    if (row && !keepSpend) await releaseSpend(tx, row);
    return row;
  });
}

async function releaseSpend(tx: Tx, row: RelayTransaction): Promise<void> {
  // RETURNING shows the new value: the day is read (and the row locked) first.
  const counted = await tx
    .selectFrom('relay_transactions')
    .select('spend_day')
    .where('id', '=', row.id)
    .forUpdate()
    .executeTakeFirst();
  const network = canonicalNetwork(row.network);
  if (!counted?.spend_day || network === undefined) return;
  await tx.updateTable('relay_transactions').set({ spend_day: null }).where('id', '=', row.id).execute();
  const common = { networkClass: NETWORK_TABLE[network].networkClass, day: counted.spend_day };
  await subtractSpend(tx, { scope: 'relay_wallet', scopeId: row.payer, ...common }, row.amount_micro);
  await subtractSpend(tx, { scope: 'relay_system', scopeId: SYSTEM_SCOPE_ID, ...common }, row.amount_micro);
}

export interface TargetPaymentRecord {
  network: string;
  amountMicroUsdc: bigint;
  /** EVM: the authorization nonce. Solana: our signature in the transaction. */
  paymentRef: string;
  payer?: string;
  validBefore?: bigint | null;
  lastValidBlockHeight?: bigint | null;
  /** The signed payment itself, kept to send it again if a reorg drops its settlement. */
  payload?: SignedPaymentPayload;
  /** upto (and batch-settlement, a voucher of ours): amountMicroUsdc is the most the target may take. Default exact. */
  scheme?: 'exact' | 'upto' | 'batch-settlement';
}

/** The columns that record our payment to the target on its relay transaction. */
export function targetPaymentColumns(target: TargetPaymentRecord) {
  return {
    target_network: target.network,
    target_amount_micro: target.amountMicroUsdc,
    target_payment_ref: target.paymentRef,
    target_payer: target.payer ?? null,
    target_valid_before: target.validBefore ?? null,
    target_last_valid_block_height: target.lastValidBlockHeight ?? null,
    target_payment_payload: target.payload ? JSON.stringify(target.payload) : null,
    target_scheme: target.scheme ?? 'exact',
  };
}

/**
 * What we pay the target with, written before it is sent: its network, amount, our payment's
 * reference and when it stops being usable. Once per relay transaction: a row that already names
 * a payment is not given another (false).
 */
export function recordTargetPayment(db: Db | Tx, id: bigint, target: TargetPaymentRecord): Promise<boolean> {
  return updateRelayTransactionIn(db, id, ['settled'], targetPaymentColumns(target), { targetPaymentRefIsNull: true });
}

/** What a delivery writes: the target's settlement hash when known, its status when given. */
function deliveredFields(target: { txHash?: string; targetStatus?: number }) {
  return {
    target_tx_hash: target.txHash ?? null,
    ...(target.targetStatus === undefined ? {} : { target_status: target.targetStatus }),
  };
}

/** settled -> delivered: the target answered (its status, when given), charged (its settlement hash when known). */
export function markDelivered(db: Db | Tx, id: bigint, target: { txHash?: string; targetStatus?: number } = {}) {
  return moveRelayTransaction(db, id, 'delivered', deliveredFields(target));
}

/**
 * markDelivered, only while no webhook record was opened for the row (a caller that would have to
 * close it in the same transaction moves it otherwise); whether it moved. Committed without waiting
 * for its flush: the chain shows the target charged, and a delivery a database crash loses leaves
 * the row settled with our payment recorded, which the follow job reads on chain and delivers.
 */
export function markDeliveredUnrecorded(
  db: Db | Tx,
  id: bigint,
  target: { txHash?: string; targetStatus?: number },
): Promise<boolean> {
  return relayTransactionMoved(db, id, 'delivered', deliveredFields(target), {
    guard: { webhookIdIsNull: true },
    withoutFlush: true,
  });
}

/** The states a refund may be written from: those RELAY_MOVES lets move to refund_pending. */
export const REFUNDABLE_STATES: readonly RelayTransactionState[] = fromStates(RELAY_MOVES, 'refund_pending');

/** A refund row is written for this transaction (again, when it was already pending). */
export function markRefundPending(db: Db | Tx, id: bigint) {
  return moveRelayTransaction(db, id, 'refund_pending');
}

export function markRefunded(db: Db | Tx, id: bigint) {
  return moveRelayTransaction(db, id, 'refunded');
}

export function markRefundFailed(db: Db | Tx, id: bigint) {
  return moveRelayTransaction(db, id, 'refund_failed');
}

/** The refund that counts for a relay transaction: the pending or confirmed one, if any. */
export async function liveRefund(db: Db | Tx, relayTransactionId: bigint): Promise<Refund | undefined> {
  return db
    .selectFrom('refunds')
    .selectAll()
    .where('relay_transaction_id', '=', relayTransactionId)
    .where('status', 'in', ['pending', 'confirmed'])
    .executeTakeFirst();
}
