/**
 * Refunds of settled client payments: the settled amount (or, after an upto target settled less
 * than its maximum, the unused part: relay_transactions.refund_micro) back to the payer, on the network they
 * paid on, from our wallet (we pay gas or the fee). Interface 3.6: a refund that is pending or
 * confirmed is the refund of its relay transaction; a further attempt sends nothing and answers it
 * at once. The partial unique index of refunds makes that hold under concurrency, and the refund's
 * transaction hash is stored before the transaction is broadcast.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/index';
import type { RefundRecord } from '../chains/family';
import { familyOf } from '../chains/registry';
import type { RefundFailureReason } from '../chains/types';
import { NETWORK_TABLE, type NetworkName } from '../basics/networkTable';
import { microToAsset } from '../basics/money';
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
import type { Deps } from '../deps';

export type { RefundFailureReason } from '../chains/types';

/** A pending refund with no transaction (we stopped before signing) is given up after this long, so it can be tried again. */
export const UNSENT_REFUND_STALE_MS = 10 * 60_000;

/**
 * refunded: the chain shows our refund. pending: it may still land (txHash once signed). failed:
 * nothing moved (refundId when a refund row records the failure). alreadyRequested: the refund
 * answered is one an earlier attempt started.
 */
export type RefundOutcome =
  | {
      kind: 'refunded';
      refundId: bigint;
      txHash: string;
      network: string;
      method: 'direct' | 'facilitator';
      alreadyRequested: boolean;
    }
  | {
      kind: 'pending';
      refundId: bigint;
      txHash: string | null;
      network: string;
      method: 'direct' | 'facilitator';
      alreadyRequested: boolean;
    }
  | { kind: 'failed'; reason: RefundFailureReason; details: string; refundId?: bigint };

function outcomeOf(refund: Refund, alreadyRequested: boolean): RefundOutcome {
  const common = { refundId: refund.id, network: refund.network, method: refund.method, alreadyRequested };
  if (refund.status === 'confirmed') return { kind: 'refunded', txHash: refund.tx_hash ?? '', ...common };
  if (refund.status === 'pending') return { kind: 'pending', txHash: refund.tx_hash, ...common };
  // failRefund stores "reason: details".
  const [reason, ...details] = (refund.error ?? 'transaction_failed: ').split(': ');
  return { kind: 'failed', reason: reason as RefundFailureReason, details: details.join(': '), refundId: refund.id };
}

export async function refundClientPayment(
  db: Db,
  relayTxId: bigint,
  deps: Pick<Deps, 'chains' | 'submissions' | 'paymentBounds'>,
): Promise<RefundOutcome> {
  const existing = await liveRefund(db, relayTxId);
  if (existing) return outcomeOf(existing, true);
  const row = await findRelayTransaction(db, relayTxId);
  if (!row) return { kind: 'failed', reason: 'not_found', details: 'no such relay transaction' };
  if (!REFUNDABLE_STATES.includes(row.state)) {
    return { kind: 'failed', reason: 'not_refundable', details: `the client's payment is ${row.state}, not settled` };
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
          // The unused part of an upto call (refund_micro), else the whole payment: never more than was taken.
          amount_micro: row.refund_micro ?? row.amount_micro,
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
    return { kind: 'failed', reason: 'not_refundable', details: 'the relay transaction left the refundable states' };
  if (refund === undefined) {
    const winner = await liveRefund(db, relayTxId);
    if (winner) return outcomeOf(winner, true);
    return {
      kind: 'failed',
      reason: 'not_refundable',
      details: 'another refund attempt ended while this one started',
    };
  }
  return familyOf(refund.network as NetworkName).sendRefund(refundRecord(db, refund, false), deps);
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
  return { kind: 'failed', reason, details, refundId: refund.id };
}

function pendingOutcome(refund: Refund, txHash: string | null): RefundOutcome {
  return {
    kind: 'pending',
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

/** The refund as the family of its network is handed it: its facts, and the writes it may make. */
function refundRecord(db: Db, refund: Refund, stale: boolean): RefundRecord<RefundOutcome> {
  return {
    network: refund.network as NetworkName,
    asset: refund.asset,
    recipient: refund.recipient,
    // What the client paid, in its asset's atomic units: our offers ask a whole number of micro-USDC.
    amount: microToAsset(refund.amount_micro, NETWORK_TABLE[refund.network as NetworkName].decimals),
    relayTransactionId: refund.relay_transaction_id,
    txHash: refund.tx_hash,
    blockhash: refund.blockhash,
    rawTx: refund.raw_tx,
    stale,
    storeTransaction: (hash, stored) => storeRefundTransaction(db, refund.id, hash, stored),
    replaceTransaction: (refused, signed) => replaceRefundTransaction(db, refund.id, refused, signed),
    confirmed: (txHash) => confirmRefund(db, refund, txHash),
    failed: (reason, details) => failRefund(db, refund, reason, details),
    pending: (txHash) => pendingOutcome(refund, txHash),
    asRecorded: async () => outcomeOf((await refundById(db, refund.id)) ?? refund, false),
  };
}

/**
 * For a pending refund: reads the chain once and confirms or fails it when the outcome is certain.
 * A refund never signed (no hash) is failed once stale; one signed but unknown to the chain is
 * failed once it can no longer land (Solana: its blockhash expired; EVM: unknown to the node and stale),
 * as the family of its network reads it.
 */
export async function reconcileRefund(
  db: Db,
  refundId: bigint,
  deps: Pick<Deps, 'chains' | 'paymentBounds' | 'clock'>,
): Promise<RefundOutcome> {
  const refund = await refundById(db, refundId);
  if (!refund) return { kind: 'failed', reason: 'not_found', details: 'no such refund' };
  if (refund.status !== 'pending') return outcomeOf(refund, true);
  const stale = deps.clock.now().getTime() - refund.updated_at.getTime() > UNSENT_REFUND_STALE_MS;
  const network = refund.network as NetworkName;
  if (!refund.tx_hash)
    return stale ? failRefund(db, refund, 'not_sent', 'the refund was never signed') : pendingOutcome(refund, null);

  return familyOf(network).reconcileRefund(refundRecord(db, refund, stale), deps);
}
