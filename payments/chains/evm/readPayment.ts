/**
 * What the chain says about an EIP-3009 authorization or a Permit2 witness transfer we signed for a
 * target (/proxy, and the second leg of /relay): the transaction the target reported is read first
 * (one receipt proves the common case), else the authorization's use is looked up (and Permit2's
 * nonce bitmap: the nonce is ours either way, and a token that moves only through Permit2 has no
 * EIP-3009 state), with the newest block read first so that an unused payment past its validBefore
 * (a permit's deadline + 1) is known to be expired.
 */
import { parseAbi, parseEventLogs, type Hex } from 'viem';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import type { ChainReading, Chains, SignedTargetPayment } from '../types';
import { logsShowAuthorizationUse } from './abi';
import { DEFAULT_LOG_CHUNK_BLOCKS, DEFAULT_MAX_SCAN_BLOCKS } from './reads';
import { findUptoSettlement, uptoAllowanceOf, uptoSettlement, type UptoAllowance } from './upto';

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
  const allowance = uptoAllowanceOf(payment.payload as { scheme?: string; payload?: unknown } | null | undefined);
  if (allowance !== undefined) return readUptoPayment(chains, network, payment, allowance, { now, reportedTxHash });
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

/**
 * An upto permit of ours: settled only with the amount the chain shows it moved. The reported (or
 * recorded) transaction is read first; else, once Permit2 says the nonce is spent, the token's
 * transfers from our wallet to the recipient are searched (a bounded sweep of the newest blocks:
 * not found is unknown, looked at again, never taken as the maximum). An unspent nonce is open
 * until the chain passes the permit's deadline.
 */
async function readUptoPayment(
  chains: Chains,
  network: NetworkName,
  payment: PaymentWithPayer,
  allowance: UptoAllowance,
  { now, reportedTxHash }: { now: Date; reportedTxHash?: string | undefined },
): Promise<ChainReading> {
  const clients = chains.evm.networks.get(network);
  const { nonce } = payment;
  if (!clients || nonce === null) return { state: 'unknown', details: `${payment.label} cannot be read on ${network}` };
  const ours = { payer: payment.payer, nonce };
  for (const candidate of new Set([reportedTxHash, payment.txHash ?? undefined])) {
    if (candidate === undefined) continue;
    const reading = await uptoSettlement(clients, ours, allowance, candidate);
    if (reading.state === 'settled')
      return { state: 'settled', txHash: candidate, amount: reading.amount, details: reading.details };
  }
  const block = await chains.evm.latestBlock(network);
  if (!block.ok) return { state: 'unknown', details: block.details };
  const spent = await chains.evm.permit2NonceUsed(network, payment.payer, nonce);
  if (!spent.ok) return { state: 'unknown', details: spent.details };
  if (spent.value) {
    const found = await findUptoSettlement(clients, ours, allowance, {
      maxBlocks: DEFAULT_MAX_SCAN_BLOCKS,
      chunkBlocks: DEFAULT_LOG_CHUNK_BLOCKS,
    });
    if (found.state === 'settled' && found.txHash !== undefined)
      return { state: 'settled', txHash: found.txHash, amount: found.amount, details: found.details };
    return { state: 'unknown', details: `Permit2 nonce spent; ${found.details}` };
  }
  return unusedUntilExpiry(payment, block.value, now, 'upto permit not settled yet');
}

/** A payment the chain has not used: expired once a block (or, on a stalled chain, the wall clock) is past its validBefore. */
function unusedUntilExpiry(
  payment: PaymentWithPayer,
  block: { number: bigint; timestamp: bigint },
  now: Date,
  openDetails: string,
): ChainReading {
  const validBefore = payment.validBefore;
  if (validBefore === null) return { state: 'unknown', details: `${payment.label} has no validBefore` };
  if (block.timestamp >= validBefore) {
    return {
      state: 'expired',
      details: `authorization unused when block ${block.number} passed its validBefore`,
    };
  }
  const nowSeconds = BigInt(Math.floor(now.getTime() / 1000));
  const decidedBySeconds = validBefore + EVM_EXPIRY_MARGIN_SECONDS;
  if (nowSeconds >= decidedBySeconds) {
    return { state: 'expired', details: `authorization unused ${EVM_EXPIRY_MARGIN_SECONDS} s after its validBefore` };
  }
  return { state: 'open', details: openDetails, expiresAt: new Date(Number(validBefore) * 1000) };
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
  return unusedUntilExpiry(payment, block.value, now, 'authorization not used yet');
}
