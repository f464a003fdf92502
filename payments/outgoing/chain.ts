/**
 * What the chain says about a payment we signed for a target (/proxy, and the second leg of
 * /relay). Only the chain decides whether the target was paid: a target's word (its status code,
 * its X-PAYMENT-RESPONSE) is a hint of where to look, never a proof.
 */
import type { Hex } from 'viem';
import { logsShowAuthorizationUse } from '../networks/evm';
import type { Chains } from '../networks/index';
import { canonicalNetwork, type NetworkName } from '../networkTable';

/** What was recorded about one payment of ours to a target before it was sent. */
export interface SignedTargetPayment {
  /** Names the payment in messages (its row). */
  label: string;
  network: string;
  chainType: 'evm' | 'solana';
  /** Our wallet's address on that chain. */
  payer: string | null;
  /** EVM: the authorization nonce. */
  nonce: string | null;
  /** Solana: our signature in the transaction. */
  payerSignature: string | null;
  /** EVM: validBefore, unix seconds. */
  validBefore: bigint | null;
  /** Solana: the last block height at which the transaction can land. */
  lastValidBlockHeight: bigint | null;
  /** A transaction the target reported or we found earlier. */
  txHash: string | null;
}

/**
 * After validBefore the token refuses the authorization in any block whose timestamp is past it.
 * When the chain has produced no such block yet (a stalled or idle chain), the wall clock decides
 * once it is this far past validBefore.
 */
export const EVM_EXPIRY_MARGIN_SECONDS = 60n;

/** Between two looks at an open payment: a quarter of the time left before it expires, within these bounds. */
export const MIN_RECHECK_MS = 1_000;
export const MAX_RECHECK_MS = 15_000;
/** Once it has expired by the clock (waiting for the chain's clock), or when no expiry time is known. */
export const EXPIRED_RECHECK_MS = 2_000;
export const UNTIMED_RECHECK_MS = 5_000;
/** After a failed read of the chain. */
export const UNREADABLE_RECHECK_MS = 10_000;

/** When to read the chain again for a payment still open: sooner as its expiry nears. */
export function nextLookAt(now: Date, expiresAt: Date | undefined): Date {
  if (expiresAt === undefined) return new Date(now.getTime() + UNTIMED_RECHECK_MS);
  const left = expiresAt.getTime() - now.getTime();
  const delay =
    left <= 0 ? EXPIRED_RECHECK_MS : Math.min(Math.max(Math.floor(left / 4), MIN_RECHECK_MS), MAX_RECHECK_MS);
  return new Date(now.getTime() + delay);
}

export type ChainReading =
  /** On chain: the transfer happened. */
  | { state: 'settled'; txHash?: string; details: string }
  /** Never settled, and can no longer be. */
  | { state: 'expired'; details: string }
  /** Not settled yet, but may still be. `expiresAt`: when the payment stops being usable by the wall clock, where known. */
  | { state: 'open'; details: string; expiresAt?: Date }
  /** The chain could not be read; try again later. */
  | { state: 'unknown'; details: string };

/** A payment whose payer is recorded: the only kind the chain can be asked about. */
type PaymentWithPayer = SignedTargetPayment & { payer: string };

function hasPayer(payment: SignedTargetPayment): payment is PaymentWithPayer {
  return payment.payer !== null;
}

export async function readPaymentOnChain(
  chains: Chains,
  payment: SignedTargetPayment,
  { now, reportedTxHash }: { now: Date; reportedTxHash?: string },
): Promise<ChainReading> {
  const network = canonicalNetwork(payment.network);
  if (network === undefined || !hasPayer(payment))
    return { state: 'unknown', details: `${payment.label} has no network or payer` };
  if (payment.chainType === 'solana')
    return readSolanaPayment(chains, network, payment, reportedTxHash ?? payment.txHash ?? undefined);
  // The transaction the target reported is read first: one receipt proves the common case, where
  // the full reading takes four calls. Anything short of proof falls back to the full reading.
  const candidate = reportedTxHash ?? payment.txHash ?? undefined;
  if (candidate !== undefined && (await receiptProvesUse(chains, network, payment, candidate))) {
    return { state: 'settled', txHash: candidate, details: 'authorization used in the reported transaction' };
  }
  return readEvmPayment(chains, network, payment, now);
}

/** Whether `hash` is a successful transaction whose USDC contract logged AuthorizationUsed for our payer and nonce. */
async function receiptProvesUse(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  hash: string,
): Promise<boolean> {
  const clients = chains.evm.networks.get(network);
  const { payer, nonce } = payment;
  if (!clients || nonce === null || !/^0x[0-9a-fA-F]{64}$/.test(hash)) return false;
  try {
    const receipt = await clients.publicClient.getTransactionReceipt({ hash: hash as Hex });
    if (receipt.status !== 'success') return false;
    return logsShowAuthorizationUse(receipt.logs, clients.usdc, { authorizer: payer, nonce });
  } catch {
    // Not found yet, or the node did not answer: the full reading decides.
    return false;
  }
}

async function readEvmPayment(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  now: Date,
): Promise<ChainReading> {
  // The block is read before the authorization: if this block is already past validBefore and the
  // authorization is unused in a state at least as new, no later block can use it.
  if (payment.nonce === null) return { state: 'unknown', details: `${payment.label} has no authorization nonce` };
  const block = await chains.evm.latestBlock(network);
  if (!block.ok) return { state: 'unknown', details: block.details };
  const use = await chains.evm.findAuthorizationUse(network, payment.payer, payment.nonce);
  if (!use.ok) return { state: 'unknown', details: use.details };
  if (use.value.state === 'settled') {
    return {
      state: 'settled',
      txHash: use.value.transactionHash,
      details: `authorization used in block ${use.value.blockNumber}`,
    };
  }
  if (use.value.state === 'used_without_event') {
    // We never cancel an authorization: a spent nonce is our transfer.
    return {
      state: 'settled',
      ...(payment.txHash ? { txHash: payment.txHash } : {}),
      details: 'authorization used (no event in the scanned blocks)',
    };
  }
  const validBefore = payment.validBefore;
  if (validBefore === null) return { state: 'unknown', details: `${payment.label} has no validBefore` };
  if (block.value.timestamp >= validBefore) {
    return {
      state: 'expired',
      details: `authorization unused when block ${block.value.number} passed its validBefore`,
    };
  }
  const nowSeconds = BigInt(Math.floor(now.getTime() / 1000));
  const decidedBySeconds = validBefore + EVM_EXPIRY_MARGIN_SECONDS;
  if (nowSeconds >= decidedBySeconds) {
    return { state: 'expired', details: `authorization unused ${EVM_EXPIRY_MARGIN_SECONDS} s after its validBefore` };
  }
  return { state: 'open', details: 'authorization not used yet', expiresAt: new Date(Number(validBefore) * 1000) };
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
    status.value.found &&
    (status.value.confirmationStatus === 'confirmed' || status.value.confirmationStatus === 'finalized');
  if (!confirmed) return { state: 'open', details: `transaction ${signature} not confirmed yet` };
  const transaction = await chains.svm.transactionSignatures(network, signature);
  if (!transaction.ok) return { state: 'unknown', details: transaction.details };
  if (!transaction.value.found || transaction.value.signatures[payment.payer] !== payment.payerSignature) {
    // Not our transfer: the report is ignored and the payment's own expiry decides.
    return { state: 'open', details: `transaction ${signature} does not carry our signature` };
  }
  if (transaction.value.failed) return { state: 'expired', details: `transaction ${signature} failed on chain` };
  return { state: 'settled', txHash: signature, details: `transaction ${signature} confirmed` };
}
