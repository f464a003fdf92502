/**
 * Settling a recorded client payment, and reconciling one whose outcome was not known at once.
 *
 * settleClientPayment claims the row (received -> settling; a paid /relay admits it already
 * settling and hands it over as admitted), verifies the payment again right
 * before broadcasting (nonce still unused, Solana blockhash still valid, simulation), then settles
 * through the facilitator (FACILITATOR_URL, in the x402 version its /supported lists for the network) or directly
 * by the family of its network (payments/chains/: EVM transferWithAuthorization sent and paid for by
 * our wallet, Solana co-signed by our wallet as fee payer). The transaction hash is stored
 * before any wait; a wait that runs out after broadcasting answers pending with that hash, never
 * failed. Once /settle was sent to a facilitator, no answer of it fails the row: only the chain
 * does. reconcileSettlement reads the chain for a row left in settling and concludes when it can.
 */
import type { Db } from '../../db/index';
import type { SettlementMethod } from '../../db/schema';
import type { ReconcileDeps, SettlementRecord } from '../chains/family';
import { familyOf } from '../chains/registry';
import type { SettleFailureReason } from '../chains/types';
import type { NetworkName } from '../basics/networkTable';
import {
  facilitatorRefusalAdvice,
  facilitatorSupport,
  facilitatorVersionFor,
  settleWithFacilitator,
} from './facilitator';
import {
  claimSettlement,
  findRelayTransaction,
  markSettled,
  markSettleFailed,
  replaceClientTxHash,
  storeClientTxHash,
  storedPayment,
  type RelayTransaction,
  type SettlingRow,
} from './store';
import type { Deps } from '../deps';
import type { RelayFields } from './states';
import { verifyPayment } from './verify';

export type { SettleFailureReason } from '../chains/types';

/**
 * settled: the chain shows the client's payment. pending: it may still land (a broadcast whose
 * outcome is not known yet, or a row another request is settling); txHash once it was broadcast.
 * failed: nothing moved, for the reason given.
 */
export type SettlementOutcome =
  /** `withFields`: what of the caller's settledFields the settled move also wrote (settleClientPayment). */
  | { kind: 'settled'; txHash: string; withFields?: RelayFields }
  | { kind: 'pending'; txHash: string | null; details?: string }
  | { kind: 'failed'; reason: SettleFailureReason; details: string };

/** What settling through a facilitator uses; the log, where given, hears why a facilitator did not settle. */
type SettleDeps = Pick<Deps, 'chains' | 'clock' | 'paymentBounds'> &
  Partial<Pick<Deps, 'log' | 'config' | 'onFacilitatorRefusedCredentials'>>;

const pending = (txHash: string | null): SettlementOutcome => ({ kind: 'pending', txHash });

/** What a row says about its settlement, for a caller that did not (or could not) act on it. */
function settlementOutcomeOf(row: RelayTransaction | undefined): SettlementOutcome {
  if (!row) return { kind: 'failed', reason: 'not_found', details: 'no such relay transaction' };
  switch (row.state) {
    case 'received':
    case 'settling':
      return pending(row.client_tx_hash);
    case 'settle_failed':
      return {
        kind: 'failed',
        reason: (row.failure_reason ?? 'transaction_failed') as SettleFailureReason,
        details: row.failure_details ?? '',
      };
    default:
      return { kind: 'settled', txHash: row.client_tx_hash ?? '' };
  }
}

async function failed(db: Db, id: bigint, reason: SettleFailureReason, details: string): Promise<SettlementOutcome> {
  const row = await markSettleFailed(db, id, reason, details);
  if (!row) return settlementOutcomeOf(await findRelayTransaction(db, id));
  return { kind: 'failed', reason, details };
}

async function settled(db: Db, id: bigint, txHash: string, settledFields?: SettledFields): Promise<SettlementOutcome> {
  const fields = settledFields?.();
  if (!(await markSettled(db, id, txHash, fields))) return settlementOutcomeOf(await findRelayTransaction(db, id));
  return fields === undefined ? { kind: 'settled', txHash } : { kind: 'settled', txHash, withFields: fields };
}

/**
 * Columns the caller wants written with the settled move itself (our payment to the target, signed
 * while the client's settled), asked for at the moment of that write; undefined writes none.
 */
export type SettledFields = () => RelayFields | undefined;

/** The row as the family of its network is handed it: its facts, and the writes it may make. */
function settlementRecord(
  db: Db,
  row: SettlingRow,
  deps: ReconcileDeps,
  settledFields?: SettledFields,
): SettlementRecord<SettlementOutcome> {
  const { payment, requirements } = storedPayment(row);
  return {
    id: row.id,
    network: row.network as NetworkName,
    asset: row.asset,
    payment,
    requirements,
    txHash: row.client_tx_hash,
    rawTx: row.client_raw_tx,
    viaFacilitator: row.settle_method === 'facilitator',
    recordedAt: row.created_at,
    reverify: (verifying) => reverify(row, verifying),
    storeTransaction: (signed) => storeClientTxHash(db, row.id, signed.hash, signed.raw),
    replaceTransaction: (refused, signed) => replaceClientTxHash(db, row.id, refused, signed),
    settled: (txHash) => settled(db, row.id, txHash, settledFields),
    failed: (reason, details) => failed(db, row.id, reason, details),
    pending,
    asRecorded: async () => settlementOutcomeOf(await findRelayTransaction(db, row.id)),
    reconcile: () => reconcileSettlement(db, row.id, deps),
  };
}

/**
 * `verifiedJustNow`: the caller verified this payment (signature and chain reads) a moment ago in
 * the same request, so settling it through a facilitator checks only the time it has left, not
 * the chain again (the facilitator verifies it, and a payment used meanwhile fails its
 * settlement). A job settling a stored payment later, and our own broadcast, always read the
 * chain again first.
 */
export async function settleClientPayment(
  db: Db,
  relayTxId: bigint,
  deps: SettleDeps & Pick<Deps, 'submissions' | 'config'>,
  {
    verifiedJustNow = false,
    admitted,
    settledFields,
  }: {
    verifiedJustNow?: boolean;
    /** The row as admitted already in settling (settleMethodFor), not claimed again here. */
    admitted?: SettlingRow;
    settledFields?: SettledFields;
  } = {},
): Promise<SettlementOutcome> {
  const { facilitatorUrl } = deps.config;
  const claimed = admitted ?? (await claimSettlement(db, relayTxId, settleMethodFor(deps.config)));
  if (!claimed) return settlementOutcomeOf(await findRelayTransaction(db, relayTxId));
  if (facilitatorUrl)
    return settleThroughFacilitator(db, claimed, deps, facilitatorUrl, verifiedJustNow, settledFields);
  return familyOf(claimed.network as NetworkName).settleDirectly(
    settlementRecord(db, claimed, deps, settledFields),
    deps,
  );
}

/** How this process settles a client's payment: through the facilitator when one is configured. */
export function settleMethodFor(config: Pick<Deps['config'], 'facilitatorUrl'>): SettlementMethod {
  return config.facilitatorUrl ? 'facilitator' : 'direct';
}

async function reverify(row: SettlingRow, deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>) {
  const { payment, requirements } = storedPayment(row);
  // The row holds only a payment whose signature was verified when it was admitted.
  return verifyPayment(payment, [requirements], deps, {
    minValiditySeconds: deps.paymentBounds.settleMarginSeconds,
    signatureVerified: true,
  });
}

async function settleThroughFacilitator(
  db: Db,
  row: SettlingRow,
  deps: SettleDeps,
  facilitatorUrl: string,
  verifiedJustNow: boolean,
  settledFields: SettledFields | undefined,
): Promise<SettlementOutcome> {
  const limits = deps.paymentBounds;
  const family = familyOf(row.network as NetworkName);
  const record = settlementRecord(db, row, deps, settledFields);
  const verified = verifiedJustNow ? await family.recheckBeforeFacilitator(record, deps) : await reverify(row, deps);
  if (!verified.ok) return failed(db, row.id, verified.reason, verified.details);
  const { payment, requirements } = storedPayment(row);
  // The version the facilitator settles this network in (its /supported, cached); version 1 when it cannot be read.
  const auth = deps.config?.facilitatorAuth;
  const support = await facilitatorSupport(facilitatorUrl, { timeoutMs: limits.facilitatorTimeoutMs, auth });
  const version = facilitatorVersionFor(support, row.network as NetworkName);
  // Facilitators require the payment's network name to equal the requirement's (ours may be an alias).
  const answer = await settleWithFacilitator(
    facilitatorUrl,
    payment,
    { ...requirements, network: payment.network },
    { timeoutMs: limits.facilitatorTimeoutMs, version, auth },
  );
  if (answer.kind === 'declined' && (answer.status === 401 || answer.status === 403)) {
    // Not a word on the payment: the facilitator did not take our request. The chain still decides.
    deps.log?.error(
      { relayTransactionId: String(row.id), network: row.network, status: answer.status },
      facilitatorRefusalAdvice(auth, answer.status),
    );
    deps.onFacilitatorRefusedCredentials?.('/settle', answer.status);
  }
  if (answer.kind === 'unconfirmed') return notSettledByFacilitator(db, row, deps, answer);
  if (answer.kind === 'declined' || answer.kind === 'unknown') return unsettledByWord(db, row, deps, answer);
  // A settlement still pending at the facilitator is followed as a settled one: its transaction is
  // stored and waited for (bounded); not confirmed by then, the row stays settling and the jobs follow it.
  const followed = await family.followFacilitatorSettlement(record, answer.transaction, deps);
  if (followed) return followed;
  // Whatever the facilitator says, the chain decides: the receipt must show our payment.
  return reconcileSettlement(db, row.id, deps);
}

/**
 * The facilitator named no transaction: it declined (a 4xx, `success: false`) or gave no readable
 * answer (a timeout, a 3xx or 5xx, a body that is not a settle response). Neither means "not
 * paid": a facilitator may settle and then answer 4xx. The chain is read once: our payment on it
 * settles the row (the caller delivers as for any settlement); else the row stays settling and the
 * answer is pending (a record the jobs finish: settled later, or failed once the payment can no
 * longer land), never a refusal that would have the client pay again.
 */
async function unsettledByWord(
  db: Db,
  row: SettlingRow,
  deps: SettleDeps,
  answer: { kind: 'declined'; errorReason: string } | { kind: 'unknown'; details: string },
): Promise<SettlementOutcome> {
  const said = answer.kind === 'declined' ? answer.errorReason : answer.details;
  deps.log?.warn(
    { relayTransactionId: String(row.id), network: row.network, answer: answer.kind, errorReason: said },
    'the facilitator did not say it settled the payment; the chain decides',
  );
  const outcome = await reconcileSettlement(db, row.id, deps);
  if (outcome.kind !== 'pending') return outcome;
  return {
    ...outcome,
    details:
      answer.kind === 'declined'
        ? `the facilitator declined it (${said}); the chain decides`
        : `${said}; the chain decides`,
  };
}

/**
 * The facilitator answered `success: false` and named a transaction: one it sent that failed, or
 * one it sent somewhere else (another network than it advertised). Nothing is waited for: the
 * chain is read once and decides. Our payment in it: settled. Mined and failed with the
 * authorization unused: refused, nothing moved. Not on this network's chain: it could still land
 * until the authorization expires, so the answer is pending at once (the client gets a record
 * that the watch job finishes), never a bare refusal that would lose a payment landing later.
 */
async function notSettledByFacilitator(
  db: Db,
  row: SettlingRow,
  deps: SettleDeps,
  answer: { transaction: string; errorReason: string },
): Promise<SettlementOutcome> {
  deps.log?.warn(
    {
      relayTransactionId: String(row.id),
      network: row.network,
      transaction: answer.transaction,
      errorReason: answer.errorReason,
    },
    'the facilitator did not settle the payment; the chain decides',
  );
  await storeClientTxHash(db, row.id, answer.transaction);
  const outcome = await reconcileSettlement(db, row.id, deps);
  if (outcome.kind !== 'pending') return outcome;
  return { ...outcome, details: `the facilitator did not settle it (${answer.errorReason})` };
}

export type { ReconcileDeps } from '../chains/family';

/**
 * For a row in settling: the family of its network reads the chain once and moves the row to
 * settled or settle_failed when the outcome is certain; otherwise answers pending. Safe to repeat;
 * other states are answered as they are.
 */
export async function reconcileSettlement(db: Db, relayTxId: bigint, deps: ReconcileDeps): Promise<SettlementOutcome> {
  const row = await findRelayTransaction(db, relayTxId);
  if (!row || row.state !== 'settling') return settlementOutcomeOf(row);
  return familyOf(row.network as NetworkName).reconcileSettlement(settlementRecord(db, row, deps), deps);
}
