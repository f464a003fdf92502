/**
 * Settling a verified upto payment for the amount we choose (at most the maximum the payer
 * signed): our wallet, the facilitator the permit names, sends x402UptoPermit2Proxy.settle the way
 * every transaction of ours is sent (../submit.ts: serialized per network and key, the pending
 * nonce read each time, gas estimated (which simulates), the hash and signed bytes handed to the
 * caller to store before the broadcast, a nonce taken by another sender of our key signed again),
 * then waits for the receipt, bounded by paymentBounds, and reads from its logs the Transfer of
 * exactly that amount from the payer to our wallet. An amount of 0 submits nothing: the permit is
 * left unused and expires at its deadline.
 *
 * Right before signing, inside the queue of our key, the permit is checked again: its deadline
 * still leaves the settlement margin, its nonce is unused, and the payer still holds and allows
 * the amount (the call ran between verification and settlement; the payer may have moved funds).
 */
import type { Hash } from 'viem';
import { fail, ok, type Result } from '../../../basics/result';
import { unixSeconds, type ChainDeps } from '../../types';
import {
  lostTransactionFate,
  readReceipt,
  rebroadcastEvmTransaction,
  submitEvmTransaction,
  waitForReceipt,
  type ReceiptOutcome,
  type SubmitFailureReason,
} from '../submit';
import { permit2NonceHex, UPTO_PERMIT2_PROXY_ADDRESS } from './payload';
import { transfersIn, uptoSettleData } from './settleData';
import type { UptoVerifyFailureReason, VerifiedUptoPayment } from './verify';

/** What settling an upto payment came to. */
export type UptoSettlement =
  /** Mined, and its logs show `amount` moved from the payer to our wallet. */
  | { state: 'settled'; txHash: Hash; amount: bigint; blockNumber: bigint }
  /** Sent (its hash stored by the caller) but not confirmed within the bound: only the chain can tell later (readUptoSettlement). */
  | { state: 'pending'; txHash: Hash; amount: bigint; details: string }
  /** The amount was 0: nothing was sent, nothing moved. */
  | { state: 'nothing_to_settle'; amount: 0n };

export type UptoSettleFailureReason =
  | UptoVerifyFailureReason
  | SubmitFailureReason
  /** Below 0 or above the permit's maximum: nothing was sent. */
  | 'invalid_amount'
  /** Our settlement was mined and reverted: nothing moved (the details name the transaction). */
  | 'transaction_reverted'
  /** Mined successfully, yet without the Transfer of the amount to us: an anomaly to look into. */
  | 'transfer_mismatch'
  /** Our stored settlement can never be mined (its nonce went to another transaction of ours): the permit is unused. */
  | 'transaction_dropped';

/** Stores our signed transaction before its broadcast (in place of `refused` when signed again); false stops it. */
export type StoreUptoTransaction = (signed: { hash: Hash; raw: `0x${string}` }, refused?: Hash) => Promise<boolean>;

/** The permit can still be settled for `amount` now: deadline margin, nonce unused, balance and allowance. */
async function settleable(
  deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds'>,
  verified: VerifiedUptoPayment,
  amount: bigint,
): Promise<Result<true, UptoVerifyFailureReason>> {
  const { permit, network } = verified;
  const margin = BigInt(deps.paymentBounds.settleMarginSeconds);
  if (permit.deadline < unixSeconds(deps.clock) + margin)
    return fail('expired', `the permit's deadline ${permit.deadline} is less than ${margin} s from now`);
  const { evm } = deps.chains;
  const [nonceUsed, allowance, balance] = await Promise.all([
    evm.permit2NonceUsed(network, permit.from, permit2NonceHex(permit.nonce)),
    evm.permit2Allowance(network, permit.from),
    evm.usdcBalance(network, permit.from),
  ]);
  if (!nonceUsed.ok) return fail('rpc_unavailable', nonceUsed.details);
  if (!allowance.ok) return fail('rpc_unavailable', allowance.details);
  if (!balance.ok) return fail('rpc_unavailable', balance.details);
  if (nonceUsed.value)
    return fail('nonce_already_used', `the Permit2 nonce ${permit.nonce} of ${permit.from} is already used`);
  if (allowance.value < amount)
    return fail(
      'permit2_allowance_missing',
      `${permit.from} allows Permit2 ${allowance.value}, settling needs ${amount}`,
    );
  if (balance.value < amount)
    return fail('insufficient_funds', `${permit.from} holds ${balance.value}, settling needs ${amount}`);
  return ok(true);
}

/** A receipt of our settlement judged: the Transfer of exactly `amount` to us, or why not. */
function judgeReceipt(
  verified: VerifiedUptoPayment,
  txHash: Hash,
  amount: bigint,
  receipt: ReceiptOutcome,
  pendingDetails: string,
): Result<UptoSettlement, UptoSettleFailureReason> {
  if (receipt.status === 'pending') return ok({ state: 'pending', txHash, amount, details: pendingDetails });
  if (receipt.status === 'reverted')
    return fail('transaction_reverted', `${txHash} reverted: nothing moved; the permit is unused`);
  const { token, from, to } = verified.permit;
  const moved = transfersIn(receipt.logs, { token, from, to });
  if (moved.length !== 1 || moved[0] !== amount)
    return fail(
      'transfer_mismatch',
      `${txHash} succeeded but logs ${moved.length === 0 ? 'no Transfer' : `Transfers of ${moved.join(', ')}`} from ${from} to ${to}, not one of ${amount}`,
    );
  return ok({ state: 'settled', txHash, amount, blockNumber: receipt.blockNumber });
}

/**
 * Settles `amount` (0 <= amount <= the maximum, in the token's atomic units) of a verified upto
 * payment from our wallet. `store` keeps the signed transaction before it leaves (the record of
 * the payment), so that a crash or a lost broadcast leaves a transaction a job can follow.
 */
export async function settleUptoPayment(
  deps: Pick<ChainDeps, 'chains' | 'clock' | 'paymentBounds' | 'submissions'>,
  verified: VerifiedUptoPayment,
  amount: bigint,
  store: StoreUptoTransaction,
): Promise<Result<UptoSettlement, UptoSettleFailureReason>> {
  if (amount < 0n || amount > verified.maximum)
    return fail('invalid_amount', `${amount} is not between 0 and the permit's maximum ${verified.maximum}`);
  if (amount === 0n) return ok({ state: 'nothing_to_settle', amount: 0n });
  const { network } = verified;
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: UPTO_PERMIT2_PROXY_ADDRESS, data: uptoSettleData(verified.permit, amount) },
    store,
    () => settleable(deps, verified, amount),
  );
  if (!submitted.ok) return submitted;
  const { hash, broadcastError } = submitted.value;
  // The node did not take it: waiting is futile, and only the chain can say later whether it landed.
  if (broadcastError !== undefined)
    return ok({ state: 'pending', txHash: hash, amount, details: `the broadcast failed: ${broadcastError}` });
  const receipt = await waitForReceipt(deps, network, hash, {
    timeoutMs: deps.paymentBounds.confirmationTimeoutMs,
    pollMs: deps.paymentBounds.confirmationPollMs,
  });
  return judgeReceipt(
    verified,
    hash,
    amount,
    receipt,
    `no receipt within ${deps.paymentBounds.confirmationTimeoutMs} ms`,
  );
}

/**
 * Our settlement of `amount` read once from the chain (a job following a pending one): settled
 * with the Transfer to us, pending while it has no receipt, or reverted. Without a receipt, its
 * stored signed bytes `raw` are sent again (its broadcast may have been lost: a process killed
 * while sending it); the same bytes are the same transaction, mined at most once. One whose nonce
 * went to another transaction of ours can never be mined: transaction_dropped (the permit unused).
 */
export async function readUptoSettlement(
  deps: Pick<ChainDeps, 'chains'>,
  verified: VerifiedUptoPayment,
  txHash: Hash,
  amount: bigint,
  raw?: string,
): Promise<Result<UptoSettlement, UptoSettleFailureReason>> {
  const { network } = verified;
  const receipt = await readReceipt(deps, network, txHash);
  if (!receipt.ok) return receipt;
  if (receipt.value.status !== 'pending' || raw === undefined)
    return judgeReceipt(verified, txHash, amount, receipt.value, 'no receipt yet');
  const resent = await rebroadcastEvmTransaction(deps, network, { hash: txHash, raw });
  if (resent !== 'nonce_taken')
    return ok({ state: 'pending', txHash, amount, details: `no receipt yet (sent again: ${resent})` });
  const fate = await lostTransactionFate(deps, network, { hash: txHash, raw });
  if (fate === 'dead')
    return fail('transaction_dropped', `${txHash} can never be mined: its nonce went to another transaction of ours`);
  if (fate === 'open') return ok({ state: 'pending', txHash, amount, details: 'no receipt yet (its nonce is taken)' });
  const mined = await readReceipt(deps, network, txHash);
  if (!mined.ok) return mined;
  return judgeReceipt(verified, txHash, amount, mined.value, 'no receipt yet');
}
