/**
 * Refunds of settled client payments: the settled amount back to the payer, on the network they
 * paid on, from our wallet (we pay gas or the fee). Interface 3.6: a refund that is pending or
 * confirmed is the refund of its relay transaction; a further attempt sends nothing and answers it
 * at once. The partial unique index of refunds makes that hold under concurrency, and the refund's
 * transaction hash is stored before the transaction is broadcast.
 */
import { sql } from 'kysely';
import { encodeFunctionData, type Address, type Hash } from 'viem';
import type { Db } from '../../db/index';
import type { NetworkName } from '../networkTable';
import {
  lostTransactionFate,
  readReceipt,
  rebroadcastEvmTransaction,
  relayUsdcAbi,
  submitEvmTransaction,
  waitForReceipt,
} from './evm';
import { moveRefund } from './refundStates';
import {
  liveRefund,
  findRelayTransaction,
  markRefunded,
  markRefundFailed,
  markRefundPending,
  REFUNDABLE_STATES,
  type Refund,
} from './store';
import {
  blockhashStillValid,
  buildSolanaRefund,
  readConfirmation,
  sendSolanaTransaction,
  waitForConfirmation,
} from './svm';
import type { Deps } from '../deps';

/** A pending refund with no transaction (we stopped before signing) is given up after this long, so it can be tried again. */
export const UNSENT_REFUND_STALE_MS = 10 * 60_000;

export type RefundFailureReason =
  | 'not_found'
  | 'not_refundable'
  | 'no_wallet'
  | 'network_not_enabled'
  | 'destination_account_missing'
  | 'insufficient_funds'
  | 'simulation_failed'
  | 'rpc_unavailable'
  | 'submission_queue_full'
  | 'broadcast_refused'
  | 'transaction_reverted'
  | 'transaction_failed'
  | 'not_sent';

export type RefundOutcome =
  | {
      refunded: true;
      refundId: bigint;
      txHash: string;
      network: string;
      method: 'direct' | 'facilitator';
      alreadyRequested: boolean;
    }
  | {
      refunded: false;
      pending: true;
      refundId: bigint;
      txHash: string | null;
      network: string;
      method: 'direct' | 'facilitator';
      alreadyRequested: boolean;
    }
  | { refunded: false; pending?: undefined; reason: RefundFailureReason; details: string; refundId?: bigint };

function outcomeOf(refund: Refund, alreadyRequested: boolean): RefundOutcome {
  const common = { refundId: refund.id, network: refund.network, method: refund.method, alreadyRequested };
  if (refund.status === 'confirmed') return { refunded: true, txHash: refund.tx_hash ?? '', ...common };
  if (refund.status === 'pending') return { refunded: false, pending: true, txHash: refund.tx_hash, ...common };
  // failRefund stores "reason: details".
  const [reason, ...details] = (refund.error ?? 'transaction_failed: ').split(': ');
  return { refunded: false, reason: reason as RefundFailureReason, details: details.join(': '), refundId: refund.id };
}

export async function refundClientPayment(
  db: Db,
  relayTxId: bigint,
  deps: Pick<Deps, 'chains' | 'submissions' | 'relayLimits'>,
): Promise<RefundOutcome> {
  const existing = await liveRefund(db, relayTxId);
  if (existing) return outcomeOf(existing, true);
  const row = await findRelayTransaction(db, relayTxId);
  if (!row) return { refunded: false, reason: 'not_found', details: 'no such relay transaction' };
  if (!REFUNDABLE_STATES.includes(row.state)) {
    return { refunded: false, reason: 'not_refundable', details: `the client's payment is ${row.state}, not settled` };
  }

  const refund = await db
    .transaction()
    .execute(async (tx) => {
      const created = await tx
        .insertInto('refunds')
        .values({
          relay_transaction_id: row.id,
          network: row.network,
          asset: row.asset,
          recipient: row.payer,
          amount_micro: row.amount_micro,
          method: 'direct',
        })
        .onConflict((conflict) =>
          conflict.column('relay_transaction_id').where('status', 'in', ['pending', 'confirmed']).doNothing(),
        )
        .returningAll()
        .executeTakeFirst();
      if (created && !(await markRefundPending(tx, row.id))) throw new StateMoved();
      return created;
    })
    .catch((error: unknown) => {
      if (error instanceof StateMoved) return null;
      throw error;
    });
  if (refund === null)
    return { refunded: false, reason: 'not_refundable', details: 'the relay transaction left the refundable states' };
  if (refund === undefined) {
    const winner = await liveRefund(db, relayTxId);
    if (winner) return outcomeOf(winner, true);
    return {
      refunded: false,
      reason: 'not_refundable',
      details: 'another refund attempt ended while this one started',
    };
  }
  return row.chain_type === 'evm' ? sendEvmRefund(db, refund, deps) : sendSolanaRefund(db, refund, deps);
}

class StateMoved extends Error {}

/** The refund's transaction, stored before its broadcast: its hash, and its blockhash (Solana) or signed bytes (EVM). */
async function storeRefundTransaction(
  db: Db,
  refundId: bigint,
  hash: string,
  { blockhash, raw }: { blockhash?: string; raw?: string },
): Promise<boolean> {
  const row = await db
    .updateTable('refunds')
    .set({ tx_hash: hash, blockhash: blockhash ?? null, raw_tx: raw ?? null, updated_at: sql<Date>`now()` })
    .where('id', '=', refundId)
    .where('status', '=', 'pending')
    .where('tx_hash', 'is', null)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** The refund signed again after its broadcast was refused for its nonce (that one can never be mined). */
async function replaceRefundTransaction(
  db: Db,
  refundId: bigint,
  refused: string,
  signed: { hash: string; raw: string },
): Promise<boolean> {
  const row = await db
    .updateTable('refunds')
    .set({ tx_hash: signed.hash, raw_tx: signed.raw, updated_at: sql<Date>`now()` })
    .where('id', '=', refundId)
    .where('status', '=', 'pending')
    .where('tx_hash', '=', refused)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

async function confirmRefund(db: Db, refund: Refund, txHash: string): Promise<RefundOutcome> {
  const done = await db.transaction().execute(async (tx) => {
    const updated = await moveRefund(tx, refund.id, 'confirmed', { tx_hash: txHash, confirmed_at: sql<Date>`now()` });
    if (updated) await markRefunded(tx, refund.relay_transaction_id);
    return updated;
  });
  return outcomeOf(done ?? (await refundById(db, refund.id)) ?? refund, false);
}

/** The refund failed and nothing moved: the relay transaction may be refunded again. */
async function failRefund(
  db: Db,
  refund: Refund,
  reason: RefundFailureReason,
  details: string,
): Promise<RefundOutcome> {
  await db.transaction().execute(async (tx) => {
    const updated = await moveRefund(tx, refund.id, 'failed', { error: `${reason}: ${details}`.slice(0, 2000) });
    if (updated) await markRefundFailed(tx, refund.relay_transaction_id);
  });
  return { refunded: false, reason, details, refundId: refund.id };
}

function pendingOutcome(refund: Refund, txHash: string | null): RefundOutcome {
  return {
    refunded: false,
    pending: true,
    refundId: refund.id,
    txHash,
    network: refund.network,
    method: refund.method,
    alreadyRequested: false,
  };
}

async function refundById(db: Db, id: bigint): Promise<Refund | undefined> {
  return db.selectFrom('refunds').selectAll().where('id', '=', id).executeTakeFirst();
}

async function sendEvmRefund(
  db: Db,
  refund: Refund,
  deps: Pick<Deps, 'chains' | 'submissions' | 'relayLimits'>,
): Promise<RefundOutcome> {
  const limits = deps.relayLimits;
  const network = refund.network as NetworkName;
  const data = encodeFunctionData({
    abi: relayUsdcAbi,
    functionName: 'transfer',
    args: [refund.recipient as Address, refund.amount_micro],
  });
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: refund.asset as Address, data },
    (signed, refused) =>
      refused === undefined
        ? storeRefundTransaction(db, refund.id, signed.hash, { raw: signed.raw })
        : replaceRefundTransaction(db, refund.id, refused, signed),
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return outcomeOf((await refundById(db, refund.id)) ?? refund, false);
    return failRefund(db, refund, submitted.reason as RefundFailureReason, submitted.details);
  }
  const { hash, broadcastError } = submitted.value;
  if (broadcastError !== undefined) return pendingOutcome(refund, hash);
  const receipt = await waitForReceipt(deps, network, hash, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (receipt.status === 'success') return confirmRefund(db, refund, hash);
  if (receipt.status === 'reverted')
    return failRefund(db, refund, 'transaction_reverted', `refund transaction ${hash} reverted`);
  return pendingOutcome(refund, hash);
}

async function sendSolanaRefund(
  db: Db,
  refund: Refund,
  deps: Pick<Deps, 'chains' | 'relayLimits'>,
): Promise<RefundOutcome> {
  const limits = deps.relayLimits;
  const network = refund.network as NetworkName;
  const built = await buildSolanaRefund(deps, network, {
    recipient: refund.recipient,
    amount: refund.amount_micro,
    relayTransactionId: refund.relay_transaction_id,
  });
  if (!built.ok) return failRefund(db, refund, built.reason, built.details);
  const { transaction, signature, blockhash } = built.value;
  if (!(await storeRefundTransaction(db, refund.id, signature, { blockhash })))
    return outcomeOf((await refundById(db, refund.id)) ?? refund, false);
  const sent = await sendSolanaTransaction(deps, network, transaction);
  if (!sent.sent && sent.refused) return failRefund(db, refund, 'broadcast_refused', sent.details);
  const confirmation = await waitForConfirmation(deps, network, signature, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (confirmation.status === 'confirmed') return confirmRefund(db, refund, signature);
  if (confirmation.status === 'failed') return failRefund(db, refund, 'transaction_failed', confirmation.details);
  return pendingOutcome(refund, signature);
}

/**
 * For a pending refund: reads the chain once and confirms or fails it when the outcome is certain.
 * A refund never signed (no hash) is failed once stale; one signed but unknown to the chain is
 * failed once it can no longer land (Solana: its blockhash expired; EVM: unknown to the node and stale).
 */
export async function reconcileRefund(
  db: Db,
  refundId: bigint,
  deps: Pick<Deps, 'chains' | 'relayLimits' | 'clock'>,
): Promise<RefundOutcome> {
  const refund = await refundById(db, refundId);
  if (!refund) return { refunded: false, reason: 'not_found', details: 'no such refund' };
  if (refund.status !== 'pending') return outcomeOf(refund, true);
  const stale = deps.clock.now().getTime() - refund.updated_at.getTime() > UNSENT_REFUND_STALE_MS;
  const network = refund.network as NetworkName;
  if (!refund.tx_hash)
    return stale ? failRefund(db, refund, 'not_sent', 'the refund was never signed') : pendingOutcome(refund, null);

  if (refund.blockhash === null) {
    const receipt = await readReceipt(deps, network, refund.tx_hash as Hash);
    if (!receipt.ok) return pendingOutcome(refund, refund.tx_hash);
    if (receipt.value.status === 'success') return confirmRefund(db, refund, refund.tx_hash);
    if (receipt.value.status === 'reverted')
      return failRefund(db, refund, 'transaction_reverted', `refund transaction ${refund.tx_hash} reverted`);
    // A broadcast lost on the way: the same signed bytes are sent again (the same transaction, once at most).
    const resent =
      refund.raw_tx === null
        ? 'failed'
        : await rebroadcastEvmTransaction(deps, network, { hash: refund.tx_hash, raw: refund.raw_tx });
    // Its nonce went to another transaction of ours that was mined (a broadcast that reached the node
    // late, after a newer one took the nonce): it can never land, so a new refund is tried at once
    // instead of after UNSENT_REFUND_STALE_MS.
    if (resent === 'nonce_taken' && refund.raw_tx !== null) {
      const fate = await lostTransactionFate(deps, network, { hash: refund.tx_hash, raw: refund.raw_tx });
      if (fate === 'dead')
        return failRefund(
          db,
          refund,
          'not_sent',
          `refund transaction ${refund.tx_hash} can never be mined: its nonce went to another transaction`,
        );
    }
    const known = resent === 'sent' || resent === 'known';
    return !known && stale
      ? failRefund(db, refund, 'not_sent', 'the node does not know the refund transaction')
      : pendingOutcome(refund, refund.tx_hash);
  }

  const confirmation = await readConfirmation(deps, network, refund.tx_hash);
  if (confirmation.status === 'confirmed') return confirmRefund(db, refund, refund.tx_hash);
  if (confirmation.status === 'failed') return failRefund(db, refund, 'transaction_failed', confirmation.details);
  const valid = await blockhashStillValid(deps, network, refund.blockhash);
  if (!valid.ok || valid.value) return pendingOutcome(refund, refund.tx_hash);
  const late = await readConfirmation(deps, network, refund.tx_hash);
  if (late.status === 'confirmed') return confirmRefund(db, refund, refund.tx_hash);
  return failRefund(db, refund, 'not_sent', 'the refund transaction can no longer land and was not found');
}
