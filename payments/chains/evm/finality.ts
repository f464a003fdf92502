/**
 * Following a settled EVM transfer to finality (docs/decisions.md, "What is final when"): its block
 * is final at the network's depth in blocks or once the node's safe or finalized head reaches it.
 * A transfer a reorg dropped is sent again from what we hold: an EIP-3009 authorization (a
 * client's, or ours to a target) by our wallet while it is unused and valid (its nonce can be used
 * once, so it never pays twice), our own refund's signed bytes again, or, once another transaction
 * of ours took their nonce, the same refund signed anew (the dropped one can then never be mined).
 */
import { encodeFunctionData, type Address, type Hash } from 'viem';
import type { FinalityRule } from '../../basics/networkTable';
import type { FinalityReading, WatchedTransfer } from '../family';
import type { PaymentPayload } from '../../x402/types';
import type { ChainDeps as Deps } from '../types';
import type { EvmNetworkClients } from './clients';
import {
  lostTransactionFate,
  readReceipt,
  rebroadcastEvmTransaction,
  receiptUsesAuthorization,
  submitEvmTransaction,
} from './submit';
import { authorizationOf, relayUsdcAbi, transferWithAuthorizationData, type CheckedAuthorization } from './verify';

type FinalityDeps = Pick<Deps, 'chains' | 'submissions' | 'paymentBounds'>;

/**
 * Until when a dropped transfer could be sent again, by the chain's clock (as the follow below
 * would): an EIP-3009 authorization until it expires (its validBefore, unix seconds), a transaction
 * whose signed bytes we keep at any time, anything else (a Permit2 payment the target's facilitator
 * settled) never.
 */
type SendableAgain = { until: bigint } | 'always' | 'never';

/** A block header as the pace of a head is read from it. */
interface HeadPoint {
  number: bigint;
  timestamp: bigint;
}

/**
 * How long the head (safe or finalized) needs to reach `blockNumber`, in ms, at the pace it has
 * kept lately: it lags the latest block by (latest.number - head.number) blocks and
 * (latest.timestamp - head.timestamp) seconds, so the blocks between it and `blockNumber` take
 * their share of that lag. Undefined when the block is reached already or the headers show no pace.
 */
function headWaitMs(blockNumber: bigint, head: HeadPoint, latest: HeadPoint): number | undefined {
  const blocks = latest.number - head.number;
  const seconds = latest.timestamp - head.timestamp;
  if (blockNumber <= head.number || blocks <= 0n || seconds <= 0n) return undefined;
  const ahead = blockNumber > latest.number ? blocks : blockNumber - head.number;
  return Number((ahead * seconds * 1000n) / blocks);
}

async function depthReading(
  clients: EvmNetworkClients,
  rule: FinalityRule,
  watch: WatchedTransfer,
  blockNumber: bigint,
  sendable: SendableAgain,
): Promise<FinalityReading> {
  const { txHash } = watch;
  const shared = watch.shared ?? (<T>(_key: string, read: () => Promise<T>) => read());
  const latestBlock = () =>
    shared(`${watch.network}:latest-block`, () => clients.publicClient.getBlock({ blockTag: 'latest' }));
  try {
    if ('blocks' in rule) {
      const latest = await latestBlock();
      const depth = latest.number - blockNumber + 1n;
      // An authorization that could still be sent again after a drop, by the chain's clock.
      const sendableUntil =
        typeof sendable === 'object' && latest.timestamp < sendable.until ? sendable.until : undefined;
      const until = sendableUntil === undefined ? {} : { sendableUntil };
      if (depth < BigInt(rule.blocks))
        return {
          state: 'pending',
          txHash,
          blockNumber,
          details: `block ${blockNumber} is ${depth} of ${rule.blocks} blocks deep`,
          ...until,
        };
      // A depth of more than one block is a bound on reorgs, not the chain's finality (one block is
      // a chain that finalizes each block, as SKALE does): a reorg deeper than it can still drop
      // the transfer. While the authorization can be sent again, such a drop is answered by sending
      // it, so the transfer is final only once it no longer could be.
      if (sendableUntil !== undefined && rule.blocks > 1)
        return {
          state: 'pending',
          txHash,
          blockNumber,
          details: `block ${blockNumber} is ${rule.blocks} blocks deep or more; final once its authorization expires (validBefore ${sendableUntil})`,
          sendableUntil,
          held: true,
        };
      return { state: 'final', txHash, blockNumber, details: `block ${blockNumber} is ${depth} blocks deep` };
    }
    if ('head' in rule) {
      const head = await shared(`${watch.network}:${rule.head}`, () =>
        clients.publicClient.getBlock({ blockTag: rule.head }),
      );
      if (blockNumber <= head.number)
        return {
          state: 'final',
          txHash,
          blockNumber,
          details: `block ${blockNumber} is at or below the ${rule.head} head`,
        };
      const pending = {
        state: 'pending',
        txHash,
        blockNumber,
        details: `block ${blockNumber} is above the ${rule.head} head`,
      } as const;
      // A drop found early can be answered only while the transfer can be sent again; after that,
      // the next look that matters is when the head can have reached the block (on a network whose
      // finalized head lags by many minutes, looks every few seconds until then would cost a chain
      // read and a write each, for nothing).
      if (sendable === 'always') return pending;
      const latest = await latestBlock();
      if (typeof sendable === 'object' && latest.timestamp < sendable.until)
        return { ...pending, sendableUntil: sendable.until };
      const quietMs = headWaitMs(blockNumber, head, latest);
      return quietMs === undefined ? pending : { ...pending, quietMs };
    }
    return { state: 'unknown', details: 'an EVM network needs a depth in blocks or a head as its finality rule' };
  } catch (error) {
    return { state: 'unknown', details: error instanceof Error ? error.message : String(error) };
  }
}

export async function followEvmTransfer(
  watch: WatchedTransfer,
  rule: FinalityRule,
  deps: FinalityDeps,
): Promise<FinalityReading> {
  const { network, txHash } = watch;
  const clients = deps.chains.evm.networks.get(network);
  if (!clients) return { state: 'unknown', details: `${network} is not an enabled EVM network` };
  const payment = watch.transfer.payment;
  // A Permit2 transfer is the proxy's call, made by the target's facilitator: nothing of ours to send again.
  const authorization =
    payment && 'authorization' in payment.payload ? authorizationOf(payment as PaymentPayload) : undefined;
  const receipt = await readReceipt(deps, network, txHash as Hash);
  if (!receipt.ok) return { state: 'unknown', details: receipt.details };
  const ours =
    receipt.value.status === 'success' &&
    (authorization === undefined || receiptUsesAuthorization(receipt.value.logs, clients.usdc, authorization));
  if (receipt.value.status === 'success' && ours) {
    const sendable: SendableAgain = authorization
      ? { until: authorization.validBefore }
      : watch.transfer.raw
        ? 'always'
        : 'never';
    return depthReading(clients, rule, watch, receipt.value.blockNumber, sendable);
  }
  if (authorization) return followAuthorization(watch, authorization, clients, deps);
  if (receipt.value.status === 'reverted') return { state: 'lost', reason: 'reverted', details: `${txHash} reverted` };
  return followOwnTransaction(watch, deps);
}

/** The authorization is not used in the watched transaction: used in another, or sent again while it can land. */
async function followAuthorization(
  watch: WatchedTransfer,
  authorization: CheckedAuthorization,
  clients: EvmNetworkClients,
  deps: FinalityDeps,
): Promise<FinalityReading> {
  const { network, txHash } = watch;
  let latestTimestamp: bigint;
  try {
    latestTimestamp = (await clients.publicClient.getBlock({ blockTag: 'latest' })).timestamp;
  } catch (error) {
    return { state: 'unknown', details: error instanceof Error ? error.message : String(error) };
  }
  const use = await deps.chains.evm.findAuthorizationUse(network, authorization.from, authorization.nonce);
  if (!use.ok) return { state: 'unknown', details: use.details };
  if (use.value.state === 'settled')
    return {
      state: 'pending',
      txHash: use.value.transactionHash,
      blockNumber: use.value.blockNumber,
      details: `the authorization is used in ${use.value.transactionHash}`,
      sendableUntil: authorization.validBefore,
    };
  if (use.value.state === 'used_without_event')
    return {
      state: 'lost',
      reason: 'nonce_used_elsewhere',
      details: 'the authorization nonce is used on chain without this transfer',
    };
  if (latestTimestamp >= authorization.validBefore)
    return {
      state: 'lost',
      reason: 'expired',
      details: `${txHash} was dropped and the authorization expired unused at ${authorization.validBefore}`,
    };
  const balance = await deps.chains.evm.usdcBalance(network, authorization.from);
  if (balance.ok && balance.value < authorization.value)
    return {
      state: 'lost',
      reason: 'balance_gone',
      details: `${txHash} was dropped and ${authorization.from} holds ${balance.value} of the ${authorization.value} it authorized`,
    };
  const submitted = await submitEvmTransaction(
    deps,
    network,
    { to: clients.usdc, data: transferWithAuthorizationData(authorization) },
    (signed) => watch.storeTransaction(signed.hash),
  );
  if (!submitted.ok) return { state: 'unknown', details: `sending ${txHash} again failed: ${submitted.details}` };
  return {
    state: 'pending',
    txHash: submitted.value.hash,
    resent: true,
    details: `${txHash} was dropped; the authorization was sent again in ${submitted.value.hash}`,
    sendableUntil: authorization.validBefore,
  };
}

/** Our own signed transaction (a refund): the same bytes again, or, once its nonce went to another of ours, signed anew. */
async function followOwnTransaction(watch: WatchedTransfer, deps: FinalityDeps): Promise<FinalityReading> {
  const { network, txHash, transfer } = watch;
  if (!transfer.raw)
    return { state: 'lost', reason: 'not_resendable', details: `${txHash} was dropped; no signed bytes are kept` };
  const signed = { hash: txHash, raw: transfer.raw };
  const resent = await rebroadcastEvmTransaction(deps, network, signed);
  if (resent === 'sent' || resent === 'known')
    return { state: 'pending', txHash, resent: resent === 'sent', details: `${txHash} was dropped and sent again` };
  if (resent === 'failed') return { state: 'unknown', details: `${txHash} is not mined and could not be sent again` };
  const fate = await lostTransactionFate(deps, network, signed);
  if (fate !== 'dead')
    return { state: 'unknown', details: `${txHash} is not mined; its nonce is taken in the mempool` };
  if (!transfer.recipient || !transfer.amount || !transfer.asset)
    return { state: 'lost', reason: 'not_resendable', details: `${txHash} can never be mined and names no transfer` };
  // Dropped for good (its nonce went to another of our transactions): the same transfer, signed anew.
  const data = encodeFunctionData({
    abi: relayUsdcAbi,
    functionName: 'transfer',
    args: [transfer.recipient as Address, BigInt(transfer.amount)],
  });
  const submitted = await submitEvmTransaction(deps, network, { to: transfer.asset as Address, data }, (next) =>
    watch.storeTransaction(next.hash),
  );
  if (!submitted.ok) {
    return submitted.reason === 'simulation_failed'
      ? { state: 'lost', reason: 'balance_gone', details: `${txHash} can never be mined: ${submitted.details}` }
      : { state: 'unknown', details: `signing ${txHash} anew failed: ${submitted.details}` };
  }
  return {
    state: 'pending',
    txHash: submitted.value.hash,
    resent: true,
    details: `${txHash} can never be mined (its nonce went to another transaction); sent anew in ${submitted.value.hash}`,
  };
}
