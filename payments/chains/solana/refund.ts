/**
 * A refund on Solana: a TransferChecked from our USDC account to the payer's, our wallet the fee
 * payer, signed and stored (its signature and blockhash) before it is sent (payments/incoming/refund.ts
 * owns the record); and its reconciliation, until its blockhash says it can no longer land.
 */
import type { RefundRecord } from '../family';
import type { ChainDeps as Deps } from '../types';
import {
  blockhashStillValid,
  buildSolanaRefund,
  readConfirmation,
  sendSolanaTransaction,
  waitForConfirmation,
} from './submit';

export async function sendSolanaRefund<O>(
  refund: RefundRecord<O>,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<O> {
  const limits = deps.paymentBounds;
  const { network } = refund;
  const built = await buildSolanaRefund(deps, network, {
    recipient: refund.recipient,
    amount: refund.amount,
    relayTransactionId: refund.relayTransactionId,
  });
  if (!built.ok) return refund.failed(built.reason, built.details);
  const { transaction, signature, blockhash } = built.value;
  if (!(await refund.storeTransaction(signature, { blockhash }))) return refund.asRecorded();
  const sent = await sendSolanaTransaction(deps, network, transaction);
  if (sent.kind === 'refused') return refund.failed('broadcast_refused', sent.details);
  const confirmation = await waitForConfirmation(deps, network, signature, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (confirmation.status === 'confirmed') return refund.confirmed(signature);
  if (confirmation.status === 'failed') return refund.failed('transaction_failed', confirmation.details);
  return refund.pending(signature);
}

export async function reconcileSolanaRefund<O>(
  refund: RefundRecord<O> & { txHash: string },
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<O> {
  const { network, txHash } = refund;
  const confirmation = await readConfirmation(deps, network, txHash);
  if (confirmation.status === 'confirmed') return refund.confirmed(txHash);
  if (confirmation.status === 'failed') return refund.failed('transaction_failed', confirmation.details);
  const valid = refund.blockhash === null ? undefined : await blockhashStillValid(deps, network, refund.blockhash);
  if (valid === undefined || !valid.ok || valid.value) return refund.pending(txHash);
  const late = await readConfirmation(deps, network, txHash);
  if (late.status === 'confirmed') return refund.confirmed(txHash);
  return refund.failed('not_sent', 'the refund transaction can no longer land and was not found');
}
