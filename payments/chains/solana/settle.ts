/**
 * Settling a client's exact payment on Solana: our wallet co-signs it as fee payer (its signature,
 * the transaction's id, stored before it is sent) and sends it; and reconciling one whose outcome
 * was not known at once, until its blockhash says it can no longer land (a facilitator's
 * transaction whose id we never learned is found by the client's signature in it). The record's writes are
 * the settling flow's (payments/incoming/settle.ts).
 */
import {
  getBase58Decoder,
  getBase64Encoder,
  getCompiledTransactionMessageDecoder,
  getSignatureFromTransaction,
  getTransactionDecoder,
  type Address,
} from '@solana/kit';
import type { ExactSvmPayload, PaymentPayload } from '../../x402/types';
import type { SettlementRecord } from '../family';
import type { ChainDeps as Deps } from '../types';
import { blockhashStillValid, readConfirmation, sendSolanaTransaction, waitForConfirmation } from './submit';
import { usdcAccountOf } from './transactions';
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

/** The client's partially signed transaction of an exact payment, decoded. */
function paymentTransaction(payment: PaymentPayload) {
  return getTransactionDecoder().decode(getBase64Encoder().encode((payment.payload as ExactSvmPayload).transaction));
}

function blockhashOf(payment: PaymentPayload): string {
  return getCompiledTransactionMessageDecoder().decode(paymentTransaction(payment).messageBytes).lifetimeToken;
}

/**
 * How many pages (of a thousand) of our token account's signatures are read back to the moment a
 * payment was recorded, looking for a transaction a facilitator settled without telling us its id.
 */
export const FACILITATOR_SEARCH_PAGES = 5;
/** How much earlier than our record's time a block's time may read (the two clocks differ). */
const CLOCK_MARGIN_SECONDS = 120n;

/**
 * A payment a facilitator may have settled without naming its transaction: the landed transaction
 * is the client's own, co-signed by the facilitator as fee payer, so it carries the client's
 * signature. Searched for by that signature among our token account's transactions since the
 * payment was recorded: found, its id is stored (then read like any other); `not_found` only when
 * every one of them was looked at; `unknown` while the node cannot tell.
 */
async function findFacilitatorTransaction<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'chains'>,
): Promise<{ kind: 'found'; transaction: string } | { kind: 'not_found' } | { kind: 'unknown' }> {
  const signed = Object.entries(paymentTransaction(record.payment).signatures).find(([, bytes]) => bytes !== null);
  if (!signed?.[1]) return { kind: 'unknown' };
  const account = await usdcAccountOf(record.requirements.payTo as Address, record.requirements.asset as Address);
  const found = await deps.chains.svm.findTransactionSignedBy(record.network, {
    account,
    signer: signed[0],
    signature: getBase58Decoder().decode(signed[1]),
    landedSince: BigInt(Math.floor(record.recordedAt.getTime() / 1000)) - CLOCK_MARGIN_SECONDS,
    maxPages: FACILITATOR_SEARCH_PAGES,
  });
  if (!found.ok || found.value.kind === 'incomplete') return { kind: 'unknown' };
  if (found.value.kind === 'found') await record.storeTransaction({ hash: found.value.transaction });
  return found.value;
}

export async function reconcileSolanaSettlement<O>(
  record: SettlementRecord<O>,
  deps: Pick<Deps, 'chains' | 'paymentBounds'>,
): Promise<O> {
  const { network } = record;
  let hash = record.txHash;
  // Through a facilitator that did not name its transaction, the chain is searched for it.
  let searched: 'not_found' | 'unknown' | undefined;
  const conclude = async (): Promise<O | undefined> => {
    if (!hash && record.viaFacilitator) {
      const found = await findFacilitatorTransaction(record, deps);
      if (found.kind === 'found') hash = found.transaction;
      else searched = found.kind;
    }
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
  // A facilitator's transaction not searched for to the end (the node, or too many since): not concluded.
  if (!hash && searched === 'unknown') return record.pending(null);
  return record.failed('expired', 'the transaction can no longer land and was not found');
}
