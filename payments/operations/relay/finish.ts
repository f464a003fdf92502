/**
 * The jobs that finish a relay transaction its request did not finish (the request gave up, timed
 * out or its process died). Each reads the row again, acts only from the state it finds, and says
 * when to look again; every move is a guarded update, so a job that runs twice does nothing more.
 *
 *   followUpRelay    received | settling | settled: settle or give up the client's payment (the
 *                    walk of payments/incoming/openPayment.ts, shared with paid chat), then read the
 *                    chain for our payment to the target: paid -> delivered (upto: what the target
 *                    settled charged, the rest refunded), can no longer be paid -> refund; a
 *                    request presumed gone before paying the target -> refund.
 *   followUpRefund   refund_pending | refund_failed: send or reconcile the refund (one per relay
 *                    transaction, spec 3.6), retried at most MAX_REFUND_ATTEMPTS times; ends the record.
 */
import { sql } from 'kysely';
import type { Db } from '../../../db/index';
import type { Deps } from '../../deps';
import {
  heldLookAt,
  nextLookAt,
  readPaymentOnChain,
  settledMicroUsdc,
  UNREADABLE_RECHECK_MS,
} from '../../outgoing/index';
import { usdcText } from '../../basics/money';
import { closeRecord, deliver, deliverUsed, refundedOutcome, scheduleRefund, targetPaymentOf } from './outcome';
import { reconcileRefund, refundClientPayment, type RefundOutcome } from '../../incoming/refund';
import { followUpOpenPayment } from '../../incoming/openPayment';
import { followChannelTarget } from './channelTarget';
import { chargeUptoClient, settleClaimedUpto, settleNothing, storedUptoOf, type UptoCharge } from './uptoClient';
import { findRelayTransaction, getRelayTransaction, liveRefund, type RelayTransaction } from '../../incoming/store';

/** A failed refund is tried again after 5 s, 10 s, 20 s, ...; after this many failures the record says refund_failed. */
export const MAX_REFUND_ATTEMPTS = 5;
const REFUND_RETRY_BASE_MS = 5_000;
/** A refund whose record is still in flight this long after its last move has lost its job. */
export const STRANDED_REFUND_AFTER_MS = 5 * 60_000;
/** A refund or settlement sent but not confirmed yet is read again after this long. */
export const UNCONFIRMED_RECHECK_MS = 2_000;

/** What a job's step leaves: nothing more to do, or a look again at lookAgainAt. */
export type FollowUp = { kind: 'done'; details: string } | { kind: 'look_again'; lookAgainAt: Date; details: string };

const done = (details: string): FollowUp => ({ kind: 'done', details });
const later = (at: Date, details: string): FollowUp => ({ kind: 'look_again', lookAgainAt: at, details });

/** A lapsed lease is looked at this long after it lapses, so that a late renewal is not taken for a death. */
const LEASE_GRACE_MS = 1_000;

/**
 * The idempotency claim a relay transaction was recorded under, as the database has it now: still
 * running (and whether its lease lapsed: the process running it stopped renewing it, so it died),
 * or ended. Undefined for a row recorded under no claim.
 */
interface RequestClaim {
  running: boolean;
  lapsed: boolean;
  leaseExpiresAt: Date | null;
}

async function requestClaimOf(db: Db, id: bigint): Promise<RequestClaim | undefined> {
  const claim = await db
    .selectFrom('relay_transactions as t')
    .innerJoin('idempotency_records as r', 'r.claim', 't.idempotency_claim')
    .select([
      'r.state',
      'r.lease_expires_at',
      sql<boolean>`coalesce(r.lease_expires_at <= now() - ${`${LEASE_GRACE_MS} milliseconds`}::interval, false)`.as(
        'lapsed',
      ),
    ])
    .where('t.id', '=', id)
    .executeTakeFirst();
  if (!claim) return undefined;
  return { running: claim.state === 'running', lapsed: claim.lapsed, leaseExpiresAt: claim.lease_expires_at };
}

/**
 * Whether the request that recorded the row has answered its client, or must be over by now: its
 * process died (the claim's lease lapsed; a restart finds its rows this way within a lease), or
 * RELAY_ABANDONED_AFTER_MS has passed.
 */
function requestGone(row: RelayTransaction, deps: Pick<Deps, 'clock' | 'config'>, claim: RequestClaim | undefined) {
  if (row.responded_at !== null) return true;
  if (deps.clock.now().getTime() - row.created_at.getTime() >= deps.config.relayAbandonedAfterMs) return true;
  return claim !== undefined && (!claim.running || claim.lapsed);
}

/** When to look again at a row whose request may still act: when its lease would lapse, at the latest when it is abandoned. */
function whenGone(row: RelayTransaction, deps: Pick<Deps, 'config'>, claim: RequestClaim | undefined): Date {
  const abandonedAt = row.created_at.getTime() + deps.config.relayAbandonedAfterMs;
  const lapsesAt = claim?.leaseExpiresAt ? claim.leaseExpiresAt.getTime() + 2 * LEASE_GRACE_MS : abandonedAt;
  return new Date(Math.min(abandonedAt, lapsesAt));
}

export async function followUpRelay(
  id: bigint,
  deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'config' | 'paymentBounds'> &
    Partial<Pick<Deps, 'submissions' | 'log' | 'onUptoChargeLost'>>,
): Promise<FollowUp> {
  const { db } = deps;
  const now = deps.clock.now();
  const claim = await requestClaimOf(db, id);
  const found = await findRelayTransaction(db, id);
  // A permit paid by upto is settled after the target, for what it used: its own walk.
  if (found?.mode === 'relay' && found.scheme === 'upto' && (found.state === 'received' || found.state === 'settling'))
    return followUpUptoClient(found, now, deps, claim);
  const neverSettled = async (row: RelayTransaction): Promise<FollowUp> => {
    await closeRecord(db, row, {
      status: 'payment_failed',
      network: row.network,
      error: `${row.failure_reason ?? 'settle_failed'}: ${row.failure_details ?? ''}`.slice(0, 2000),
      message: 'Your payment was not settled on-chain; nothing was charged and nothing needs refunding',
    });
    return done('the client payment never settled');
  };
  return followUpOpenPayment<FollowUp>(deps, id, {
    mode: 'relay',
    missing: () => done('no such relay transaction'),
    requestActive: (row, state) =>
      requestGone(row, deps, claim)
        ? undefined
        : later(
            whenGone(row, deps, claim),
            state === 'received' ? 'the request may still settle it' : 'the request is settling it',
          ),
    abandonedDetails: 'the request ended before the payment was settled; nothing was charged',
    settlementPending: () => later(new Date(now.getTime() + UNCONFIRMED_RECHECK_MS), 'settlement not confirmed yet'),
    neverSettled,
    settled: (row) => followUpSettled(row, now, deps, claim),
    inState: { settle_failed: neverSettled },
    otherwise: (row) => done(`nothing to do in state ${row.state}`),
  });
}

/** The client's payment is settled: our payment to the target decides between delivery and refund. */
async function followUpSettled(
  row: RelayTransaction,
  now: Date,
  deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'config'>,
  claim: RequestClaim | undefined,
): Promise<FollowUp> {
  const { db } = deps;
  const id = row.id;
  if (row.target_payment_ref === null) {
    if (!requestGone(row, deps, claim))
      return later(whenGone(row, deps, claim), 'the request may still pay the target');
    await scheduleRefund(db, id, { reason: 'the request ended before the target was paid' });
    return done('refund scheduled: the target was never paid');
  }
  if (row.target_scheme === 'batch-settlement') {
    // Paid by a voucher of ours: its record (or the chain's claims) decides, not a transfer.
    const decided = await followChannelTarget(deps, row, requestGone(row, deps, claim));
    return decided === undefined
      ? later(heldLookAt(now, row.created_at), 'our voucher to the target is not decided yet')
      : done(decided);
  }
  const reading = await readPaymentOnChain(deps.chains, targetPaymentOf(row), { now });
  switch (reading.state) {
    case 'settled': {
      if (row.scheme === 'upto') {
        // The client's permit was settled for what the target used (charged_micro): nothing to refund.
        await deliver(db, id, { ...(row.target_tx_hash ? { txHash: row.target_tx_hash } : {}) });
        return done(`the target charged; the permit settled ${row.settled_atomic ?? '?'}: ${reading.details}`);
      }
      if (row.target_scheme === 'upto') {
        // Charged only what the chain shows the target settled; held (looked at again) until then.
        const used = settledMicroUsdc(row.target_network ?? '', reading);
        if (used === undefined)
          return later(heldLookAt(now, row.created_at), `settled, amount not known yet: ${reading.details}`);
        const { refund } = await deliverUsed(db, id, {
          txHash: used.txHash,
          usedMicro: used.usedMicro,
          fees: { percent: deps.config.relayFeePercent, minUsdc: deps.config.relayFeeMinUsdc },
        });
        return done(
          `the target settled ${used.usedMicro} micro-USDC${refund ? `; ${refund.refundMicro} micro-USDC refunded` : ''}: ${reading.details}`,
        );
      }
      await deliver(db, id, { ...(reading.txHash ? { txHash: reading.txHash } : {}) });
      return done(`the target charged: ${reading.details}`);
    }
    case 'expired':
      await scheduleRefund(db, id, {
        reason: `the target never charged: ${reading.details}`,
        targetNeverCharged: true,
      });
      return done(`refund scheduled: ${reading.details}`);
    case 'open':
      return later(nextLookAt(now, reading.expiresAt), reading.details);
    case 'unknown':
      return later(new Date(now.getTime() + UNREADABLE_RECHECK_MS), reading.details);
  }
}

/**
 * A relay paid by an upto permit, not settled yet (received) or being settled (settling). Before
 * the target was paid, a request gone leaves the permit unused. After: the chain says what the
 * target settled, and the permit is settled for that plus the fee; a target that can no longer
 * charge leaves the permit unused. A settlement of ours sent before is read again (sent again
 * when it was never broadcast).
 */
async function followUpUptoClient(
  row: RelayTransaction,
  now: Date,
  deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'config' | 'paymentBounds'> &
    Partial<Pick<Deps, 'submissions' | 'log' | 'onUptoChargeLost'>>,
  claim: RequestClaim | undefined,
): Promise<FollowUp> {
  const { db } = deps;
  const id = row.id;
  if (!requestGone(row, deps, claim)) return later(whenGone(row, deps, claim), 'the request may still finish it');
  const unused = async (reason: string, details: string) => {
    await settleNothing(db, id, reason, details);
    const moved = await getRelayTransaction(db, id);
    await closeRecord(db, moved, {
      status: 'payment_failed',
      network: row.network,
      error: `${reason}: ${details}`.slice(0, 2000),
      message: 'Your permit was not settled: nothing was taken',
    });
    return done(`nothing taken: ${details}`);
  };
  const payment = storedUptoOf(deps, row);
  const { submissions, log, onUptoChargeLost } = deps;
  if (payment === undefined || submissions === undefined || log === undefined || onUptoChargeLost === undefined)
    return later(new Date(now.getTime() + UNREADABLE_RECHECK_MS), 'the permit cannot be settled by this process now');
  const full = { ...deps, submissions, log, onUptoChargeLost };
  if (row.state === 'settling') return uptoChargeFollowUp(await settleClaimedUpto(full, row, payment), now);
  if (row.target_payment_ref === null) return unused('abandoned', 'the request ended before the target was paid');
  const reading = await readPaymentOnChain(deps.chains, targetPaymentOf(row), { now });
  switch (reading.state) {
    case 'settled': {
      const used = settledMicroUsdc(row.target_network ?? '', reading);
      if (used === undefined)
        return later(heldLookAt(now, row.created_at), `settled, amount not known yet: ${reading.details}`);
      const charged = await chargeUptoClient(full, id, payment, { usedMicro: used.usedMicro, txHash: used.txHash });
      return uptoChargeFollowUp(charged, now);
    }
    case 'expired':
      return unused('target_never_charged', `the target never charged: ${reading.details}`);
    case 'open':
      return later(nextLookAt(now, reading.expiresAt), reading.details);
    case 'unknown':
      return later(new Date(now.getTime() + UNREADABLE_RECHECK_MS), reading.details);
  }
}

function uptoChargeFollowUp(charged: UptoCharge, now: Date): FollowUp {
  switch (charged.kind) {
    case 'settled':
      return done(`the permit settled ${charged.amount} in ${charged.txHash}`);
    case 'pending':
      return later(
        new Date(now.getTime() + UNCONFIRMED_RECHECK_MS),
        `our settlement ${charged.txHash} not confirmed yet`,
      );
    case 'later':
      return later(new Date(now.getTime() + UNREADABLE_RECHECK_MS), charged.details);
    case 'nothing':
      return done('nothing was settled under the permit');
    case 'failed':
      return done(`the permit could not be settled: ${charged.reason}: ${charged.details}`);
  }
}

async function failedRefundCount(db: Db, id: bigint): Promise<number> {
  const row = await db
    .selectFrom('refunds')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('relay_transaction_id', '=', id)
    .where('status', '=', 'failed')
    .executeTakeFirst();
  return Number(row?.count ?? 0);
}

export async function followUpRefund(
  id: bigint,
  deps: Pick<Deps, 'db' | 'chains' | 'clock' | 'submissions' | 'paymentBounds'>,
): Promise<FollowUp> {
  const { db } = deps;
  const row = await findRelayTransaction(db, id);
  if (!row || row.mode !== 'relay') return done('no such relay transaction');
  const now = deps.clock.now();
  if (row.state === 'refunded') return finishRefunded(row, deps);
  if (row.state !== 'refund_pending' && row.state !== 'refund_failed')
    return done(`nothing to refund in state ${row.state}`);

  const failures = await failedRefundCount(db, id);
  const live = await liveRefund(db, id);
  let outcome: RefundOutcome;
  if (live?.status === 'pending') {
    outcome = await reconcileRefund(db, live.id, deps);
  } else if (failures >= MAX_REFUND_ATTEMPTS) {
    return giveUp(row, failures, deps);
  } else {
    outcome = await refundClientPayment(db, id, deps);
  }
  if (outcome.kind === 'refunded') return finishRefunded(await getRelayTransaction(db, id), deps);
  if (outcome.kind === 'pending')
    return later(
      new Date(now.getTime() + UNCONFIRMED_RECHECK_MS),
      `refund ${outcome.txHash ?? '(not sent yet)'} not confirmed yet`,
    );
  const attempts = await failedRefundCount(db, id);
  if (attempts >= MAX_REFUND_ATTEMPTS) return giveUp(await getRelayTransaction(db, id), attempts, deps);
  const delayMs = REFUND_RETRY_BASE_MS * 2 ** Math.max(0, attempts - 1);
  return later(
    new Date(now.getTime() + delayMs),
    `refund attempt ${attempts} failed: ${outcome.reason}: ${outcome.details}`,
  );
}

async function finishRefunded(row: RelayTransaction, deps: Pick<Deps, 'db'>): Promise<FollowUp> {
  const refund = await liveRefund(deps.db, row.id);
  if (refund?.status !== 'confirmed') return done('refunded, but no confirmed refund row');
  await closeRecord(deps.db, row, refundedOutcome(row, refund));
  return done(`refund ${refund.tx_hash} confirmed`);
}

async function giveUp(row: RelayTransaction, attempts: number, deps: Pick<Deps, 'db'>): Promise<FollowUp> {
  const last = await deps.db
    .selectFrom('refunds')
    .select('error')
    .where('relay_transaction_id', '=', row.id)
    .where('status', '=', 'failed')
    .orderBy('id', 'desc')
    .executeTakeFirst();
  await closeRecord(deps.db, row, {
    status: 'refund_failed',
    network: row.network,
    error:
      `the refund of ${usdcText(row.amount_micro)} failed ${attempts} times; last: ${last?.error ?? 'unknown'}`.slice(
        0,
        2000,
      ),
    message: 'The refund could not be made; an operator will retry it',
  });
  return done(`refund given up after ${attempts} attempts`);
}

/**
 * Rows whose job may have been lost (a process stopped between a commit and the job, or a job
 * gave up): open rows whose request is presumed gone, and refunds whose record is still in flight.
 */
export async function strandedRelayTransactions(db: Db, now: Date, abandonedAfterMs: number, limit: number) {
  const before = new Date(now.getTime() - abandonedAfterMs);
  const open = await db
    .selectFrom('relay_transactions')
    .select('id')
    .where('mode', '=', 'relay')
    .where('state', 'in', ['received', 'settling', 'settled'])
    .where('updated_at', '<', before)
    .orderBy('updated_at')
    .limit(limit)
    .execute();
  const refunding = await db
    .selectFrom('relay_transactions')
    .innerJoin('webhooks', 'webhooks.id', 'relay_transactions.webhook_id')
    .select('relay_transactions.id')
    .where('relay_transactions.mode', '=', 'relay')
    .where('relay_transactions.state', 'in', ['refund_pending', 'refund_failed', 'refunded'])
    .where('webhooks.status', '=', 'async_processing')
    .where('relay_transactions.updated_at', '<', new Date(now.getTime() - STRANDED_REFUND_AFTER_MS))
    .orderBy('relay_transactions.updated_at')
    .limit(limit)
    .execute();
  return { open: open.map((row) => row.id), refunding: refunding.map((row) => row.id) };
}
