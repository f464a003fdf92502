/**
 * What the chain says about an EIP-3009 authorization or a Permit2 witness transfer we signed for a
 * target (/proxy, and the second leg of /relay): the transaction the target reported is read first
 * (one receipt proves the common case), else the authorization's use is looked up (and Permit2's
 * nonce bitmap: the nonce is ours either way, and a token that moves only through Permit2 has no
 * EIP-3009 state), with the newest block read first so that an unused payment past its validBefore
 * (a permit's deadline + 1) is known to be expired.
 */
import { parseAbi, parseEventLogs, type Hex } from 'viem';
import { NETWORK_TABLE, type NetworkName } from '../../networkTable';
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

const transferEvent = parseAbi(['event Transfer(address indexed from, address indexed to, uint256 value)']);

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

/**
 * Whether `hash` is a successful transaction whose USDC contract logged AuthorizationUsed for our
 * payer and nonce, or (Permit2) moved our wallet's tokens while our Permit2 nonce is spent.
 */
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
    if (logsShowAuthorizationUse(receipt.logs, clients.usdc, { authorizer: payer, nonce })) return true;
    // A Permit2 witness transfer logs nothing of its own: the token leaving our wallet in this
    // transaction, with our Permit2 nonce spent, is its proof.
    const movedOurs = parseEventLogs({ abi: transferEvent, logs: receipt.logs, eventName: 'Transfer' }).some(
      (log) =>
        log.address.toLowerCase() === clients.usdc.toLowerCase() && log.args.from.toLowerCase() === payer.toLowerCase(),
    );
    if (!movedOurs) return false;
    const used = await chains.evm.permit2NonceUsed(network, payer, nonce);
    return used.ok && used.value;
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
  const permit2Only = NETWORK_TABLE[network].transferMethod === 'permit2';
  const use = permit2Only
    ? ({ ok: true, value: { state: 'unused' } } as const)
    : await chains.evm.findAuthorizationUse(network, payment.payer, payment.nonce);
  if (!use.ok) return { state: 'unknown', details: use.details };
  if (use.value.state === 'unused') {
    const permitUsed = await chains.evm.permit2NonceUsed(network, payment.payer, payment.nonce);
    if (!permitUsed.ok) return { state: 'unknown', details: permitUsed.details };
    // We never invalidate a Permit2 nonce: a spent one is our transfer.
    if (permitUsed.value)
      return {
        state: 'settled',
        ...(payment.txHash ? { txHash: payment.txHash } : {}),
        details: 'Permit2 nonce spent',
      };
  }
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
