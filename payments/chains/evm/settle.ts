/**
 * Settling a client's EIP-3009 authorization on an EVM network, and reconciling a settlement whose
 * outcome was not known at once: our wallet submits transferWithAuthorization (the hash and signed
 * bytes stored before the broadcast), or a facilitator did and our node is asked for its receipt.
 * The record's writes are the settling flow's (payments/incoming/settle.ts).
 */
import type { Address, Hash } from 'viem';
import { fail, ok, type Result } from '../../basics/result';
import type { ReconcileDeps, SettlementRecord } from '../family';
import type { ChainDeps as Deps } from '../types';
import {
  readReceipt,
  rebroadcastEvmTransaction,
  receiptUsesAuthorization,
  submitEvmTransaction,
  waitForReceipt,
  type ReceiptOutcome,
} from './submit';
import { authorizationOf, transferWithAuthorizationData } from './verify';

/** An EVM authorization verified a moment ago: still valid for the settlement margin? */
export function stillValid<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'clock' | 'paymentBounds'>,
): Result<true, 'expired'> {
  const { validBefore } = authorizationOf(record.payment);
  const now = BigInt(Math.floor(deps.clock.now().getTime() / 1000));
  const margin = BigInt(deps.paymentBounds.settleMarginSeconds);
  if (validBefore < now + margin)
    return fail('expired', `the authorization expires at ${validBefore}, less than ${margin} s from now`);
  return ok(true);
}

/** Inside the queue of our key: nothing of ours can use the nonce between this check and the send. */
async function reverified<O>(record: SettlementRecord<O>, deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>) {
  const verified = await record.reverify(deps);
  return verified.ok ? ok(true as const) : verified;
}

export async function settleEvmDirectly<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'chains' | 'clock' | 'submissions' | 'paymentBounds'>,
): Promise<O> {
  const limits = deps.paymentBounds;
  const { network } = record;
  const authorization = authorizationOf(record.payment);
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: record.asset as Address, data: transferWithAuthorizationData(authorization) },
    (signed, refused) =>
      refused === undefined ? record.storeTransaction(signed) : record.replaceTransaction(refused, signed),
    () => reverified(record, deps),
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return record.asRecorded();
    return record.failed(submitted.reason, submitted.details);
  }
  const { hash, broadcastError } = submitted.value;
  // The node did not take it: waiting is futile, and only the chain can say later whether it landed.
  if (broadcastError !== undefined) return record.pending(hash);
  const receipt = await waitForReceipt(deps, network, hash, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (receipt.status === 'success') return record.settled(hash);
  if (receipt.status === 'pending') return record.pending(hash);
  // Reverted: someone may have used the authorization first; the chain says who.
  return record.reconcile();
}

/**
 * A facilitator answered "settled" once its node had the receipt, so ours usually has it too: read
 * once, and a receipt that shows our payment settles the record in one write with its hash.
 * Anything else (no receipt yet, a revert, an unreadable node) stores the hash first, then waits
 * for our node to see it, bounded; undefined leaves it to the chain's reading.
 */
export async function followEvmFacilitatorSettlement<O>(
  record: SettlementRecord<O>,
  txHash: string,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<O | undefined> {
  const { network } = record;
  const limits = deps.paymentBounds;
  const usdc = deps.chains.evm.networks.get(network)?.usdc;
  // A successful receipt that shows our payment: settled, without reading it once more.
  const showsOurPayment = (receipt: ReceiptOutcome) =>
    receipt.status === 'success' &&
    usdc !== undefined &&
    receiptUsesAuthorization(receipt.logs, usdc, authorizationOf(record.payment));
  const first = await readReceipt(deps, network, txHash as Hash);
  if (first.ok && showsOurPayment(first.value)) return record.settled(txHash);
  await record.storeTransaction({ hash: txHash });
  const wait = { timeoutMs: limits.confirmationTimeoutMs, pollMs: limits.confirmationPollMs };
  const receipt = await waitForReceipt(deps, network, txHash as Hash, wait);
  if (showsOurPayment(receipt)) return record.settled(txHash);
  return undefined;
}

export async function reconcileEvmSettlement<O>(record: SettlementRecord<O>, deps: ReconcileDeps): Promise<O> {
  const { network } = record;
  const clients = deps.chains.evm.networks.get(network);
  if (!clients) return record.pending(record.txHash);
  const authorization = authorizationOf(record.payment);
  let ourTransactionReverted = false;
  let neverMined = false;
  if (record.txHash) {
    const receipt = await readReceipt(deps, network, record.txHash as Hash);
    if (
      receipt.ok &&
      receipt.value.status === 'success' &&
      receiptUsesAuthorization(receipt.value.logs, clients.usdc, authorization)
    ) {
      return record.settled(record.txHash);
    }
    ourTransactionReverted = receipt.ok && receipt.value.status === 'reverted';
    // Not mined: if its broadcast was lost on the way the node never heard of it. The same signed
    // bytes are sent again (the same transaction: it lands at most once), so it lands in seconds
    // instead of leaving the payment open until the authorization expires.
    if (receipt.ok && receipt.value.status === 'pending' && record.rawTx !== null) {
      const resent = await rebroadcastEvmTransaction(deps, network, { hash: record.txHash, raw: record.rawTx });
      // Lost, and its nonce went to another transaction of ours meanwhile: it can never be mined.
      neverMined = resent === 'nonce_taken';
    }
  }
  // The newest block first: once its timestamp reaches validBefore, no later block can use the authorization.
  let latestTimestamp: bigint;
  try {
    latestTimestamp = (await clients.publicClient.getBlock({ blockTag: 'latest' })).timestamp;
  } catch {
    return record.pending(record.txHash);
  }
  const use = await deps.chains.evm.findAuthorizationUse(network, authorization.from, authorization.nonce);
  if (!use.ok) return record.pending(record.txHash);
  if (use.value.state === 'settled') return record.settled(use.value.transactionHash);
  if (use.value.state === 'used_without_event') {
    return record.failed(
      'authorization_canceled',
      'the nonce is used on chain without a transfer to us in the scanned blocks',
    );
  }
  if (latestTimestamp >= authorization.validBefore) {
    return record.failed('expired', `the authorization expired unused at ${authorization.validBefore}`);
  }
  // Our transaction is mined and failed, and nobody used the authorization: nothing moved.
  if (ourTransactionReverted)
    return record.failed('transaction_reverted', `${record.txHash} reverted; the authorization is unused`);
  if (neverMined && record.txHash && deps.submissions && deps.clock)
    return settleAgain(record, record.txHash, { ...deps, submissions: deps.submissions, clock: deps.clock });
  return record.pending(record.txHash);
}

/**
 * Our settling transaction can never be mined (its broadcast was lost and its nonce went to another
 * transaction of ours) and the authorization is still unused: the settlement is signed again with
 * the pending nonce, in place of the dead one on the record, and broadcast. An authorization is used
 * at most once on chain, so even a second transaction of ours for it could not move money twice.
 */
async function settleAgain<O>(
  record: SettlementRecord<O>,
  dead: string,
  deps: Pick<Deps, 'chains' | 'paymentBounds' | 'submissions' | 'clock'>,
): Promise<O> {
  const authorization = authorizationOf(record.payment);
  const submitted = await submitEvmTransaction(
    deps,
    record.network,
    { to: record.asset as Address, data: transferWithAuthorizationData(authorization) },
    (signed, refused) => record.replaceTransaction(refused ?? dead, signed),
    () => reverified(record, deps),
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return record.asRecorded();
    // Not signed again (the window is too short now, the node unreachable): the chain decides later.
    return record.pending(dead);
  }
  return record.pending(submitted.value.hash);
}
