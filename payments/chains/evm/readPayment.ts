/**
 * What the chain says about an EIP-3009 authorization we signed for a target (/proxy, and the
 * second leg of /relay): the transaction the target reported is read first (one receipt proves the
 * common case), else the authorization's use is looked up, with the newest block read first so
 * that an unused authorization past its validBefore is known to be expired.
 */
import type { Hex } from 'viem';
import type { NetworkName } from '../../networkTable';
import type { Chains } from '../index';
import type { ChainReading, SignedTargetPayment } from '../types';
import { logsShowAuthorizationUse } from './abi';

/**
 * After validBefore the token refuses the authorization in any block whose timestamp is past it.
 * When the chain has produced no such block yet (a stalled or idle chain), the wall clock decides
 * once it is this far past validBefore.
 */
export const EVM_EXPIRY_MARGIN_SECONDS = 60n;

type PaymentWithPayer = SignedTargetPayment & { payer: string };

export async function readEvmTargetPayment(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  { now, reportedTxHash }: { now: Date; reportedTxHash?: string },
): Promise<ChainReading> {
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
