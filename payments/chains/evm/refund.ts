/**
 * A refund on an EVM network: a USDC transfer from our wallet to the payer, signed and stored
 * before its broadcast (payments/incoming/refund.ts owns the record), and its reconciliation: the
 * receipt read once, a lost broadcast sent again, a refund whose nonce went to another of our
 * transactions given up so a new one can be tried.
 */
import { encodeFunctionData, type Address, type Hash } from 'viem';
import type { RefundRecord } from '../family';
import type { ChainDeps as Deps, RefundFailureReason } from '../types';
import {
  lostTransactionFate,
  readReceipt,
  rebroadcastEvmTransaction,
  submitEvmTransaction,
  waitForReceipt,
} from './submit';
import { relayUsdcAbi } from './verify';

export async function sendEvmRefund<O>(
  refund: RefundRecord<O>,
  deps: Pick<Deps, 'chains' | 'submissions' | 'paymentBounds'>,
): Promise<O> {
  const limits = deps.paymentBounds;
  const { network } = refund;
  const data = encodeFunctionData({
    abi: relayUsdcAbi,
    functionName: 'transfer',
    args: [refund.recipient as Address, refund.amount],
  });
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: refund.asset as Address, data },
    (signed, refused) =>
      refused === undefined
        ? refund.storeTransaction(signed.hash, { raw: signed.raw })
        : refund.replaceTransaction(refused, signed),
  );
  if (!submitted.ok) {
    if (submitted.reason === 'not_recorded') return refund.asRecorded();
    return refund.failed(submitted.reason as RefundFailureReason, submitted.details);
  }
  const { hash, broadcastError } = submitted.value;
  if (broadcastError !== undefined) return refund.pending(hash);
  const receipt = await waitForReceipt(deps, network, hash, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (receipt.status === 'success') return refund.confirmed(hash);
  if (receipt.status === 'reverted')
    return refund.failed('transaction_reverted', `refund transaction ${hash} reverted`);
  return refund.pending(hash);
}

/** A pending refund with a transaction: unknown to the chain and stale, it is failed so that it can be tried again. */
export async function reconcileEvmRefund<O>(
  refund: RefundRecord<O> & { txHash: string },
  deps: Pick<Deps, 'chains'>,
): Promise<O> {
  const { network, txHash } = refund;
  const receipt = await readReceipt(deps, network, txHash as Hash);
  if (!receipt.ok) return refund.pending(txHash);
  if (receipt.value.status === 'success') return refund.confirmed(txHash);
  if (receipt.value.status === 'reverted')
    return refund.failed('transaction_reverted', `refund transaction ${txHash} reverted`);
  // A broadcast lost on the way: the same signed bytes are sent again (the same transaction, once at most).
  const resent =
    refund.rawTx === null
      ? 'failed'
      : await rebroadcastEvmTransaction(deps, network, { hash: txHash, raw: refund.rawTx });
  // Its nonce went to another transaction of ours that was mined (a broadcast that reached the node
  // late, after a newer one took the nonce): it can never land, so a new refund is tried at once
  // instead of after UNSENT_REFUND_STALE_MS.
  if (resent === 'nonce_taken' && refund.rawTx !== null) {
    const fate = await lostTransactionFate(deps, network, { hash: txHash, raw: refund.rawTx });
    if (fate === 'dead')
      return refund.failed(
        'not_sent',
        `refund transaction ${txHash} can never be mined: its nonce went to another transaction`,
      );
  }
  const known = resent === 'sent' || resent === 'known';
  return !known && refund.stale
    ? refund.failed('not_sent', 'the node does not know the refund transaction')
    : refund.pending(txHash);
}
