/**
 * Following a settled Solana transaction to finality (docs/decisions.md, "What is final when"): it
 * is final once the cluster reports it at the `finalized` commitment. A transaction the cluster no
 * longer knows (its fork was abandoned) may still land while its blockhash is valid (the same
 * signed transaction, sent again by whoever holds it whole); once the blockhash has expired it can
 * never land and the transfer is lost.
 */
import type { FinalityRule } from '../../networkTable';
import type { FinalityReading, WatchedTransfer } from '../family';
import type { ChainDeps as Deps } from '../types';
import { blockhashStillValid } from './submit';

export async function followSolanaTransfer(
  watch: WatchedTransfer,
  rule: FinalityRule,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
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
  const blockhash = watch.transfer.blockhash;
  if (!blockhash) return { state: 'pending', txHash, details: `${txHash} is not known to the cluster` };
  const valid = await blockhashStillValid(deps, network, blockhash);
  if (!valid.ok) return { state: 'unknown', details: valid.details };
  if (valid.value)
    return { state: 'pending', txHash, details: `${txHash} is not known to the cluster; its blockhash is valid` };
  return {
    state: 'lost',
    reason: 'expired',
    details: `${txHash} is not known to the cluster and its blockhash has expired`,
  };
}
