/**
 * Settling a recorded client payment, and reconciling one whose outcome was not known at once.
 *
 * settleClientPayment claims the row (received -> settling), verifies the payment again right
 * before broadcasting (nonce still unused, Solana blockhash still valid, simulation), then settles
 * through the facilitator (FACILITATOR_URL, in the x402 version its /supported lists for the network) or directly: EVM transferWithAuthorization sent and paid
 * for by our wallet, Solana co-signed by our wallet as fee payer. The transaction hash is stored
 * before any wait; a wait that runs out after broadcasting answers pending with that hash, never
 * failed. reconcileSettlement reads the chain for a row left in settling and concludes when it can.
 */
import {
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
} from '@solana/kit';
import type { Address, Hash } from 'viem';
import type { Db } from '../../db/index';
import type { NetworkName } from '../networkTable';
import { type ExactSvmPayload, type PaymentPayload } from '../x402/types';
import { fail, ok, type Result } from '../result';
import {
  authorizationOf,
  readReceipt,
  rebroadcastEvmTransaction,
  receiptUsesAuthorization,
  submitEvmTransaction,
  transferWithAuthorizationData,
  waitForReceipt,
  type ReceiptOutcome,
} from './evm';
import { facilitatorSupport, facilitatorVersionFor, settleWithFacilitator } from './facilitator';
import {
  claimSettlement,
  findRelayTransaction,
  markSettled,
  markSettleFailed,
  replaceClientTxHash,
  storeClientTxHash,
  storedPayment,
  type RelayTransaction,
} from './store';
import {
  blockhashStillValid,
  readConfirmation,
  sendSolanaTransaction,
  verifySolanaPayment,
  waitForConfirmation,
} from './svm';
import type { Deps } from '../deps';
import type { VerifyFailureReason } from './types';
import { verifyPayment } from './verify';

export type SettleFailureReason =
  | VerifyFailureReason
  | 'not_found'
  | 'no_wallet'
  | 'network_not_enabled'
  | 'submission_queue_full'
  | 'facilitator_refused'
  | 'broadcast_refused'
  | 'transaction_reverted'
  | 'transaction_failed'
  | 'authorization_canceled';

export type SettlementOutcome =
  | { settled: true; txHash: string }
  | { settled: false; pending: true; txHash: string | null; details?: string }
  | { settled: false; pending?: undefined; reason: SettleFailureReason; details: string };

/** What settling through a facilitator uses; the log, where given, hears why a facilitator did not settle. */
type SettleDeps = Pick<Deps, 'chains' | 'clock' | 'relayLimits'> & Partial<Pick<Deps, 'log'>>;

const pending = (txHash: string | null): SettlementOutcome => ({ settled: false, pending: true, txHash });

/** What a row says about its settlement, for a caller that did not (or could not) act on it. */
export function settlementOutcomeOf(row: RelayTransaction | undefined): SettlementOutcome {
  if (!row) return { settled: false, reason: 'not_found', details: 'no such relay transaction' };
  switch (row.state) {
    case 'received':
    case 'settling':
      return pending(row.client_tx_hash);
    case 'settle_failed':
      return {
        settled: false,
        reason: (row.failure_reason ?? 'transaction_failed') as SettleFailureReason,
        details: row.failure_details ?? '',
      };
    default:
      return { settled: true, txHash: row.client_tx_hash ?? '' };
  }
}

async function failed(db: Db, id: bigint, reason: SettleFailureReason, details: string): Promise<SettlementOutcome> {
  const row = await markSettleFailed(db, id, reason, details);
  if (!row) return settlementOutcomeOf(await findRelayTransaction(db, id));
  return { settled: false, reason, details };
}

async function settled(db: Db, id: bigint, txHash: string): Promise<SettlementOutcome> {
  const row = await markSettled(db, id, txHash);
  if (!row) return settlementOutcomeOf(await findRelayTransaction(db, id));
  return { settled: true, txHash };
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
  { verifiedJustNow = false }: { verifiedJustNow?: boolean } = {},
): Promise<SettlementOutcome> {
  const { facilitatorUrl } = deps.config;
  const claimed = await claimSettlement(db, relayTxId, facilitatorUrl ? 'facilitator' : 'direct');
  if (!claimed) return settlementOutcomeOf(await findRelayTransaction(db, relayTxId));
  if (facilitatorUrl) return settleThroughFacilitator(db, claimed, deps, facilitatorUrl, verifiedJustNow);
  return claimed.chain_type === 'evm' ? settleEvmDirectly(db, claimed, deps) : settleSolanaDirectly(db, claimed, deps);
}

async function reverify(row: RelayTransaction, deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>) {
  const { payment, requirements } = storedPayment(row);
  // The row holds only a payment whose signature was verified when it was admitted.
  return verifyPayment(payment, [requirements], deps, {
    minValiditySeconds: deps.relayLimits.settleMarginSeconds,
    signatureVerified: true,
  });
}

/** An EVM authorization verified a moment ago: still valid for the settlement margin? */
function stillValid(row: RelayTransaction, deps: Pick<Deps, 'clock' | 'relayLimits'>): Result<true, 'expired'> {
  const { validBefore } = authorizationOf(storedPayment(row).payment);
  const now = BigInt(Math.floor(deps.clock.now().getTime() / 1000));
  const margin = BigInt(deps.relayLimits.settleMarginSeconds);
  if (validBefore < now + margin)
    return fail('expired', `the authorization expires at ${validBefore}, less than ${margin} s from now`);
  return ok(true);
}

async function settleThroughFacilitator(
  db: Db,
  row: RelayTransaction,
  deps: SettleDeps,
  facilitatorUrl: string,
  verifiedJustNow: boolean,
): Promise<SettlementOutcome> {
  const limits = deps.relayLimits;
  const verified = verifiedJustNow && row.chain_type === 'evm' ? stillValid(row, deps) : await reverify(row, deps);
  if (!verified.ok) return failed(db, row.id, verified.reason, verified.details);
  const { payment, requirements } = storedPayment(row);
  // The version the facilitator settles this network in (its /supported, cached); version 1 when it cannot be read.
  const support = await facilitatorSupport(facilitatorUrl, { timeoutMs: limits.facilitatorTimeoutMs });
  const version = facilitatorVersionFor(support, row.network as NetworkName);
  // Facilitators require the payment's network name to equal the requirement's (ours may be an alias).
  const answer = await settleWithFacilitator(
    facilitatorUrl,
    payment,
    { ...requirements, network: payment.network },
    { timeoutMs: limits.facilitatorTimeoutMs, version },
  );
  if (answer.kind === 'refused') {
    deps.log?.warn(
      { relayTransactionId: String(row.id), network: row.network, errorReason: answer.errorReason },
      'the facilitator refused to settle the payment',
    );
    return failed(db, row.id, 'facilitator_refused', answer.errorReason);
  }
  if (answer.kind === 'unconfirmed') return notSettledByFacilitator(db, row, deps, answer);
  if (answer.kind === 'settled') {
    const network = row.network as NetworkName;
    const usdc = deps.chains.evm.networks.get(network)?.usdc;
    // A successful receipt that shows our payment: settled, without reading it once more.
    const showsOurPayment = (receipt: ReceiptOutcome) =>
      receipt.status === 'success' &&
      usdc !== undefined &&
      receiptUsesAuthorization(receipt.logs, usdc, authorizationOf(payment));
    if (row.chain_type === 'evm') {
      // A facilitator answers "settled" once its node has the receipt, so ours usually has it too:
      // read once, and a receipt that shows our payment settles the row in one write with its hash.
      // Anything else (no receipt yet, a revert, an unreadable node) stores the hash first, as below.
      const first = await readReceipt(deps, network, answer.transaction as Hash);
      if (first.ok && showsOurPayment(first.value)) return settled(db, row.id, answer.transaction);
    }
    await storeClientTxHash(db, row.id, answer.transaction);
    // Our node may see the transaction a little after the facilitator's did: wait for it, bounded.
    const wait = { timeoutMs: limits.confirmationTimeoutMs, pollMs: limits.confirmationPollMs };
    if (row.chain_type === 'evm') {
      const receipt = await waitForReceipt(deps, network, answer.transaction as Hash, wait);
      if (showsOurPayment(receipt)) return settled(db, row.id, answer.transaction);
    } else await waitForConfirmation(deps, network, answer.transaction, wait);
  }
  // Whatever the facilitator says, the chain decides: the receipt must show our payment.
  return reconcileSettlement(db, row.id, deps);
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
  row: RelayTransaction,
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
  if (outcome.settled || !outcome.pending) return outcome;
  return { ...outcome, details: `the facilitator did not settle it (${answer.errorReason})` };
}

async function settleEvmDirectly(
  db: Db,
  row: RelayTransaction,
  deps: Pick<Deps, 'chains' | 'clock' | 'submissions' | 'relayLimits'>,
): Promise<SettlementOutcome> {
  const limits = deps.relayLimits;
  const network = row.network as NetworkName;
  const { payment } = storedPayment(row);
  const authorization = authorizationOf(payment);
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: row.asset as Address, data: transferWithAuthorizationData(authorization) },
    (signed, refused) =>
      refused === undefined
        ? storeClientTxHash(db, row.id, signed.hash, signed.raw)
        : replaceClientTxHash(db, row.id, refused, signed),
    async () => {
      // Inside the queue of our key: nothing of ours can use the nonce between this check and the send.
      const verified = await reverify(row, deps);
      return verified.ok ? ok(true as const) : verified;
    },
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return settlementOutcomeOf(await findRelayTransaction(db, row.id));
    return failed(db, row.id, submitted.reason, submitted.details);
  }
  const { hash, broadcastError } = submitted.value;
  // The node did not take it: waiting is futile, and only the chain can say later whether it landed.
  if (broadcastError !== undefined) return pending(hash);
  const receipt = await waitForReceipt(deps, network, hash, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (receipt.status === 'success') return settled(db, row.id, hash);
  if (receipt.status === 'pending') return pending(hash);
  // Reverted: someone may have used the authorization first; the chain says who.
  return reconcileSettlement(db, row.id, deps);
}

async function settleSolanaDirectly(
  db: Db,
  row: RelayTransaction,
  deps: Pick<Deps, 'chains' | 'clock' | 'relayLimits'>,
): Promise<SettlementOutcome> {
  const limits = deps.relayLimits;
  const network = row.network as NetworkName;
  const { payment, requirements } = storedPayment(row);
  const verified = await verifySolanaPayment(payment, requirements, network, deps);
  if (!verified.ok) return failed(db, row.id, verified.reason, verified.details);
  const signed = verified.value.coSigned;
  if (!signed)
    return failed(
      db,
      row.id,
      'invalid_offer',
      'the payment names a fee payer that is not our wallet; only a facilitator can settle it',
    );
  const signature = getSignatureFromTransaction(signed);
  if (!(await storeClientTxHash(db, row.id, signature)))
    return settlementOutcomeOf(await findRelayTransaction(db, row.id));
  const sent = await sendSolanaTransaction(deps, network, signed);
  if (!sent.sent && sent.refused) return failed(db, row.id, 'broadcast_refused', sent.details);
  const confirmation = await waitForConfirmation(deps, network, signature, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (confirmation.status === 'confirmed') return settled(db, row.id, signature);
  if (confirmation.status === 'failed') return failed(db, row.id, 'transaction_failed', confirmation.details);
  return pending(signature);
}

/**
 * For a row in settling: reads the chain once and moves the row to settled or settle_failed when
 * the outcome is certain; otherwise answers pending. Safe to repeat; other states are answered as they are.
 */
/**
 * What reconciling uses; with the submission queue and a clock (the jobs have both) it can also
 * sign a lost settlement again when its nonce went to another transaction of ours.
 */
export type ReconcileDeps = Pick<Deps, 'chains' | 'relayLimits'> & Partial<Pick<Deps, 'submissions' | 'clock'>>;

export async function reconcileSettlement(db: Db, relayTxId: bigint, deps: ReconcileDeps): Promise<SettlementOutcome> {
  const row = await findRelayTransaction(db, relayTxId);
  if (!row || row.state !== 'settling') return settlementOutcomeOf(row);
  return row.chain_type === 'evm' ? reconcileEvm(db, row, deps) : reconcileSolana(db, row, deps);
}

async function reconcileEvm(db: Db, row: RelayTransaction, deps: ReconcileDeps): Promise<SettlementOutcome> {
  const network = row.network as NetworkName;
  const clients = deps.chains.evm.networks.get(network);
  if (!clients) return pending(row.client_tx_hash);
  const authorization = authorizationOf(storedPayment(row).payment);
  let ourTransactionReverted = false;
  let neverMined = false;
  if (row.client_tx_hash) {
    const receipt = await readReceipt(deps, network, row.client_tx_hash as Hash);
    if (
      receipt.ok &&
      receipt.value.status === 'success' &&
      receiptUsesAuthorization(receipt.value.logs, clients.usdc, authorization)
    ) {
      return settled(db, row.id, row.client_tx_hash);
    }
    ourTransactionReverted = receipt.ok && receipt.value.status === 'reverted';
    // Not mined: if its broadcast was lost on the way the node never heard of it. The same signed
    // bytes are sent again (the same transaction: it lands at most once), so it lands in seconds
    // instead of leaving the payment open until the authorization expires.
    if (receipt.ok && receipt.value.status === 'pending' && row.client_raw_tx !== null) {
      const resent = await rebroadcastEvmTransaction(deps, network, {
        hash: row.client_tx_hash,
        raw: row.client_raw_tx,
      });
      // Lost, and its nonce went to another transaction of ours meanwhile: it can never be mined.
      neverMined = resent === 'nonce_taken';
    }
  }
  // The newest block first: once its timestamp reaches validBefore, no later block can use the authorization.
  let latestTimestamp: bigint;
  try {
    latestTimestamp = (await clients.publicClient.getBlock({ blockTag: 'latest' })).timestamp;
  } catch {
    return pending(row.client_tx_hash);
  }
  const use = await deps.chains.evm.findAuthorizationUse(network, authorization.from, authorization.nonce);
  if (!use.ok) return pending(row.client_tx_hash);
  if (use.value.state === 'settled') return settled(db, row.id, use.value.transactionHash);
  if (use.value.state === 'used_without_event') {
    return failed(
      db,
      row.id,
      'authorization_canceled',
      'the nonce is used on chain without a transfer to us in the scanned blocks',
    );
  }
  if (latestTimestamp >= authorization.validBefore) {
    return failed(db, row.id, 'expired', `the authorization expired unused at ${authorization.validBefore}`);
  }
  // Our transaction is mined and failed, and nobody used the authorization: nothing moved.
  if (ourTransactionReverted)
    return failed(db, row.id, 'transaction_reverted', `${row.client_tx_hash} reverted; the authorization is unused`);
  if (neverMined && row.client_tx_hash && deps.submissions && deps.clock)
    return settleAgain(db, row, row.client_tx_hash, { ...deps, submissions: deps.submissions, clock: deps.clock });
  return pending(row.client_tx_hash);
}

/**
 * Our settling transaction can never be mined (its broadcast was lost and its nonce went to another
 * transaction of ours) and the authorization is still unused: the settlement is signed again with
 * the pending nonce, in place of the dead one on the row, and broadcast. An authorization is used
 * at most once on chain, so even a second transaction of ours for it could not move money twice.
 */
async function settleAgain(
  db: Db,
  row: RelayTransaction,
  dead: string,
  deps: Pick<Deps, 'chains' | 'relayLimits' | 'submissions' | 'clock'>,
): Promise<SettlementOutcome> {
  const network = row.network as NetworkName;
  const authorization = authorizationOf(storedPayment(row).payment);
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: row.asset as Address, data: transferWithAuthorizationData(authorization) },
    (signed, refused) => replaceClientTxHash(db, row.id, refused ?? dead, signed),
    async () => {
      const verified = await reverify(row, deps);
      return verified.ok ? ok(true as const) : verified;
    },
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return settlementOutcomeOf(await findRelayTransaction(db, row.id));
    // Not signed again (the window is too short now, the node unreachable): the chain decides later.
    return pending(dead);
  }
  return pending(submitted.value.hash);
}

function blockhashOf(payment: PaymentPayload): string {
  const transaction = getTransactionDecoder().decode(
    getBase64Encoder().encode((payment.payload as ExactSvmPayload).transaction),
  );
  return getCompiledTransactionMessageDecoder().decode(transaction.messageBytes).lifetimeToken;
}

async function reconcileSolana(
  db: Db,
  row: RelayTransaction,
  deps: Pick<Deps, 'chains' | 'relayLimits'>,
): Promise<SettlementOutcome> {
  const network = row.network as NetworkName;
  const hash = row.client_tx_hash;
  const conclude = async (): Promise<SettlementOutcome | undefined> => {
    if (!hash) return undefined;
    const confirmation = await readConfirmation(deps, network, hash);
    if (confirmation.status === 'confirmed') return settled(db, row.id, hash);
    if (confirmation.status === 'failed') return failed(db, row.id, 'transaction_failed', confirmation.details);
    return undefined;
  };
  const known = await conclude();
  if (known) return known;
  const valid = await blockhashStillValid(deps, network, blockhashOf(storedPayment(row).payment));
  if (!valid.ok || valid.value) return pending(hash);
  // The blockhash expired: the transaction can no longer land. Read once more, in case it landed just before.
  const late = await conclude();
  if (late) return late;
  // Through a facilitator without its answer we never learned the transaction id: only an operator can tell.
  if (!hash && row.settle_method === 'facilitator') return pending(null);
  return failed(db, row.id, 'expired', 'the transaction can no longer land and was not found');
}
