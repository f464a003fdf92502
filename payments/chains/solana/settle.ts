/**
 * Settling a client's exact payment on Solana: our wallet co-signs it as fee payer (its signature,
 * the transaction's id, stored before it is sent) and sends it; and reconciling one whose outcome
 * was not known at once, until its blockhash says it can no longer land. The record's writes are
 * the settling flow's (payments/incoming/settle.ts).
 */
import {
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
} from '@solana/kit';
import type { ExactSvmPayload, PaymentPayload } from '../../x402/types';
import type { SettlementRecord } from '../family';
import type { ChainDeps as Deps } from '../types';
import { blockhashStillValid, readConfirmation, sendSolanaTransaction, waitForConfirmation } from './submit';
import { verifySolanaPayment } from './verify';

export async function settleSolanaDirectly<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'chains' | 'clock' | 'paymentBounds'>,
): Promise<O> {
  const limits = deps.paymentBounds;
  const { network } = record;
  const verified = await verifySolanaPayment(record.payment, record.requirements, network, deps);
  if (!verified.ok) return record.failed(verified.reason, verified.details);
  const signed = verified.value.coSigned;
  if (!signed)
    return record.failed(
      'invalid_offer',
      'the payment names a fee payer that is not our wallet; only a facilitator can settle it',
    );
  const signature = getSignatureFromTransaction(signed);
  if (!(await record.storeTransaction({ hash: signature }))) return record.asRecorded();
  const sent = await sendSolanaTransaction(deps, network, signed);
  if (sent.kind === 'refused') return record.failed('broadcast_refused', sent.details);
  const confirmation = await waitForConfirmation(deps, network, signature, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  if (confirmation.status === 'confirmed') return record.settled(signature);
  if (confirmation.status === 'failed') return record.failed('transaction_failed', confirmation.details);
  return record.pending(signature);
}

/** A facilitator said it settled in `txHash`: stored, and our node given a bounded time to see it; the chain decides. */
export async function followSolanaFacilitatorSettlement<O>(
  record: SettlementRecord<O>,
  txHash: string,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<undefined> {
  const limits = deps.paymentBounds;
  await record.storeTransaction({ hash: txHash });
  await waitForConfirmation(deps, record.network, txHash, {
    timeoutMs: limits.confirmationTimeoutMs,
    pollMs: limits.confirmationPollMs,
  });
  return undefined;
}

function blockhashOf(payment: PaymentPayload): string {
  const transaction = getTransactionDecoder().decode(
    getBase64Encoder().encode((payment.payload as ExactSvmPayload).transaction),
  );
  return getCompiledTransactionMessageDecoder().decode(transaction.messageBytes).lifetimeToken;
}

export async function reconcileSolanaSettlement<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<O> {
  const { network } = record;
  const hash = record.txHash;
  const conclude = async (): Promise<O | undefined> => {
    if (!hash) return undefined;
    const confirmation = await readConfirmation(deps, network, hash);
    if (confirmation.status === 'confirmed') return record.settled(hash);
    if (confirmation.status === 'failed') return record.failed('transaction_failed', confirmation.details);
    return undefined;
  };
  const known = await conclude();
  if (known) return known;
  const valid = await blockhashStillValid(deps, network, blockhashOf(record.payment));
  if (!valid.ok || valid.value) return record.pending(hash);
  // The blockhash expired: the transaction can no longer land. Read once more, in case it landed just before.
  const late = await conclude();
  if (late) return late;
  // Through a facilitator without its answer we never learned the transaction id: only an operator can tell.
  if (!hash && record.viaFacilitator) return record.pending(null);
  return record.failed('expired', 'the transaction can no longer land and was not found');
}
