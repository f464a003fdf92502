/**
 * What the chain says about an exact payment we signed for a target on Solana: the transaction the
 * target reported, when it is confirmed and carries our signature, else the block height against
 * the payment's last valid block height.
 */
import type { NetworkName } from '../../basics/networkTable';
import type { ChainReading, Chains, SignedTargetPayment } from '../types';

type PaymentWithPayer = SignedTargetPayment & { payer: string };

export function readSolanaTargetPayment(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  { reportedTxHash }: { now: Date; reportedTxHash?: string },
): Promise<ChainReading> {
  return readSolanaPayment(chains, network, payment, reportedTxHash ?? payment.txHash ?? undefined);
}

async function readSolanaPayment(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  candidate: string | undefined,
): Promise<ChainReading> {
  // Height first, for the same reason as the EVM block: a later "not found" is then final.
  const height = await chains.svm.blockHeight(network);
  if (candidate !== undefined) {
    const landed = await ourTransaction(chains, network, payment, candidate);
    if (landed.state !== 'open') return landed;
  }
  if (!height.ok) return { state: 'unknown', details: height.details };
  if (payment.lastValidBlockHeight === null)
    return { state: 'unknown', details: `${payment.label} has no last valid block height` };
  if (height.value > payment.lastValidBlockHeight) {
    return {
      state: 'expired',
      details:
        candidate === undefined
          ? `no transaction reported, and block height ${height.value} is past the payment's last valid block height`
          : `transaction ${candidate} not confirmed, and block height ${height.value} is past the payment's last valid block height`,
    };
  }
  return { state: 'open', details: 'transaction not confirmed yet' };
}

/** Whether `signature` is a confirmed transaction that carries our signature of this payment. */
async function ourTransaction(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  signature: string,
): Promise<ChainReading> {
  const status = await chains.svm.signatureStatus(network, signature);
  if (!status.ok) return { state: status.reason === 'invalid_argument' ? 'open' : 'unknown', details: status.details };
  const confirmed =
    status.value.kind === 'found' &&
    (status.value.confirmationStatus === 'confirmed' || status.value.confirmationStatus === 'finalized');
  if (!confirmed) return { state: 'open', details: `transaction ${signature} not confirmed yet` };
  const transaction = await chains.svm.transactionSignatures(network, signature);
  if (!transaction.ok) return { state: 'unknown', details: transaction.details };
  if (transaction.value.kind !== 'found' || transaction.value.signatures[payment.payer] !== payment.payerSignature) {
    // Not our transfer: the report is ignored and the payment's own expiry decides.
    return { state: 'open', details: `transaction ${signature} does not carry our signature` };
  }
  if (transaction.value.failed) return { state: 'expired', details: `transaction ${signature} failed on chain` };
  return { state: 'settled', txHash: signature, details: `transaction ${signature} confirmed` };
}
