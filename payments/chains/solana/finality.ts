/**
 * Following a settled Solana transaction to finality (docs/decisions.md, "What is final when"): it
 * is final once the cluster reports it at the `finalized` commitment. A transaction the cluster no
 * longer knows (its fork was abandoned) can land again only while its blockhash is valid: a
 * client's transaction whose fee payer is our wallet is signed again (the same signature: the same
 * transaction, executed at most once) and sent; one we cannot complete (a facilitator pays its
 * fees) is followed until its blockhash expires, and is then lost.
 */
import {
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  partiallySignTransaction,
  type Transaction,
} from '@solana/kit';
import type { FinalityRule } from '../../basics/networkTable';
import type { FinalityReading, WatchedTransfer } from '../family';
import type { ChainDeps as Deps } from '../types';
import { blockhashStillValid, sendSolanaTransaction } from './submit';

type FinalityDeps = Pick<Deps, 'chains' | 'paymentBounds'>;

/** The x402 payload's transaction, when the watch holds one. */
function heldTransaction(watch: WatchedTransfer): Transaction | undefined {
  const wire = (watch.transfer.payment?.payload as { transaction?: unknown } | undefined)?.transaction;
  if (typeof wire !== 'string') return undefined;
  try {
    return getTransactionDecoder().decode(getBase64Encoder().encode(wire));
  } catch {
    return undefined;
  }
}

export async function followSolanaTransfer(
  watch: WatchedTransfer,
  rule: FinalityRule,
  deps: FinalityDeps,
): Promise<FinalityReading> {
  const { network, txHash } = watch;
  if (!('commitment' in rule))
    return { state: 'unknown', details: 'a Solana network needs a commitment as its finality rule' };
  const status = await deps.chains.svm.signatureStatus(network, txHash);
  if (!status.ok) return { state: 'unknown', details: status.details };
  if (status.value.kind === 'found') {
    const { slot, confirmationStatus, failed } = status.value;
    if (failed) return { state: 'lost', reason: 'reverted', details: `${txHash} failed in slot ${slot}` };
    return confirmationStatus === rule.commitment
      ? { state: 'final', txHash, blockNumber: slot, details: `${txHash} is ${confirmationStatus} in slot ${slot}` }
      : {
          state: 'pending',
          txHash,
          blockNumber: slot,
          details: `${txHash} is ${confirmationStatus ?? 'processed'} in slot ${slot}`,
        };
  }
  const held = heldTransaction(watch);
  const blockhash =
    watch.transfer.blockhash ??
    (held ? getCompiledTransactionMessageDecoder().decode(held.messageBytes).lifetimeToken : undefined);
  if (!blockhash) return { state: 'pending', txHash, details: `${txHash} is not known to the cluster` };
  const valid = await blockhashStillValid(deps, network, blockhash);
  if (!valid.ok) return { state: 'unknown', details: valid.details };
  if (!valid.value)
    return {
      state: 'lost',
      reason: 'expired',
      details: `${txHash} is not known to the cluster and its blockhash has expired`,
    };
  const signer = deps.chains.svm.signer;
  if (!held || !signer) return { state: 'pending', txHash, details: `${txHash} is not known to the cluster` };
  // Our fee-payer signature completes it; signed again, it is the very transaction that was dropped.
  const signed = await partiallySignTransaction([signer.keyPair], held).catch(() => undefined);
  // Without the fee payer's signature (a facilitator's) it has no signature of its own yet.
  const signature = signed?.signatures[Object.keys(signed.signatures)[0] as keyof typeof signed.signatures];
  if (!signed || !signature || getSignatureFromTransaction(signed) !== txHash)
    return { state: 'pending', txHash, details: `${txHash} is not known to the cluster; we cannot send it again` };
  const sent = await sendSolanaTransaction(deps, network, signed);
  if (sent.kind === 'refused')
    return { state: 'unknown', details: `sending ${txHash} again was refused: ${sent.details}` };
  return { state: 'pending', txHash, resent: true, details: `${txHash} was dropped and sent again` };
}
