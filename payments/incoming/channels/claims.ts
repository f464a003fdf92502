/**
 * Collecting what channel clients owe us (worker/tasks/channelClaims.ts, every minute): per network,
 * one claimer at a time across instances (an advisory lock), which
 *
 * 1. watches: reads from the chain every channel with charges not yet claimed or a claim due, and
 *    stores its state (balance, totalClaimed, withdrawRequestedAt, refundNonce): a payer who started
 *    a withdrawal makes its channel's claim due at once;
 * 2. claims, when a withdrawal is pending on any of them, when the unclaimed charges reach
 *    CHANNEL_RECEIVER_CLAIM_THRESHOLD_USDC, or when the oldest unclaimed charge is
 *    CHANNEL_RECEIVER_CLAIM_PERIOD_SECONDS old: every channel's latest voucher, up to
 *    MAX_CLAIMS_PER_TRANSACTION channels in one claimWithSignature signed by our receiver
 *    authorizer key (our wallet), the transaction recorded before its broadcast;
 * 3. settles what is claimed and not yet settled for our wallet and the token: settle(receiver,
 *    token), one transfer of everything claimed.
 *
 * A claim is idempotent on chain (a row at or below the channel's total changes nothing), so a
 * claim sent twice after a crash costs gas and moves nothing twice.
 */
import type { Address, Hex } from 'viem';
import { microToAsset, parseUsdc } from '../../basics/money';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import type { EvmNetworkClients } from '../../chains/evm/clients';
import { batchSettlementReceiverAbi } from '../../chains/evm/batchSettlement/receiverAbi';
import { BATCH_SETTLEMENT_ADDRESS } from '../../chains/evm/batchSettlement/voucher';
import {
  claimCall,
  readChannelOnChain,
  receiverClients,
  sendReceiverCall,
  settleCall,
  signClaimBatch,
  type ReceiverClaim,
} from '../../chains/evm/batchSettlement/receiverChain';
import type { ChannelDeps } from './receive';
import {
  channelNetworks,
  channelsToWatch,
  markReceiverTransaction,
  recordReceiverTransaction,
  storeOnchain,
  withNetworkClaimLock,
  type StoredChannel,
} from './store';

/** Channels per claim transaction (the goal is at least 50 in one). */
export const MAX_CLAIMS_PER_TRANSACTION = 100;
/** Channels watched per network and run; the next run takes the rest. */
const WATCH_BATCH = 1_000;
const RECEIPT_TIMEOUT_MS = 60_000;

export interface ClaimReport {
  network: NetworkName;
  watched: number;
  /** Why it claimed: a pending withdrawal, the threshold, the period, or asked to. */
  reason?: 'withdrawal' | 'threshold' | 'period' | 'forced';
  claims: { hash: Hex; channels: number; amount: bigint; state: string }[];
  settle?: { hash: Hex; amount: bigint; state: string };
}

async function claimedNotSettled(clients: EvmNetworkClients, receiver: Address, token: Address): Promise<bigint> {
  const [totalClaimed, totalSettled] = await clients.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementReceiverAbi,
    functionName: 'receivers',
    args: [receiver, token],
  });
  return totalClaimed - totalSettled;
}

/** Claims and settles on every network that takes channels or holds channel rows. */
export async function collectChannels(deps: ChannelDeps, { force = false } = {}): Promise<ClaimReport[]> {
  const names = new Set<string>([...deps.config.receiverChannels.networks, ...(await channelNetworks(deps.db))]);
  const reports: ClaimReport[] = [];
  for (const name of names) {
    const network = canonicalNetwork(name);
    if (network === undefined) continue;
    const report = await withNetworkClaimLock(deps.db, network, () => collectOn(deps, network, force));
    // A forced run that found another claimer at work fails, so that its job is tried again.
    if (report === undefined && force) throw new Error(`another claimer holds the channel claims of ${network}`);
    if (report) reports.push(report);
  }
  return reports;
}

/** The losses this process has logged (a channel and what it can still give): each is logged once, not every minute. */
const lossesLogged = new Set<string>();

/** What a claim can take on a channel: what we charged, at most its voucher's ceiling and its balance on chain. */
function claimTotal(channel: StoredChannel): bigint {
  let total = channel.chargedCumulative;
  if (channel.signedMaxClaimable < total) total = channel.signedMaxClaimable;
  if (channel.balance < total) total = channel.balance;
  return total;
}

async function collectOn(deps: ChannelDeps, network: NetworkName, force: boolean): Promise<ClaimReport> {
  const report: ClaimReport = { network, watched: 0, claims: [] };
  const clients = receiverClients(deps, network);
  const receiver = clients?.walletClient?.account.address;
  if (!clients || !receiver) return report;

  // 1. Watch.
  const watched: StoredChannel[] = [];
  // Only channels read from the chain in this run are claimed: one the chain cannot honour would revert the whole batch.
  const read: StoredChannel[] = [];
  for (const channel of await channelsToWatch(deps.db, network, WATCH_BATCH)) {
    const onchain = await readChannelOnChain(clients, channel.channelId);
    if (!onchain.ok) {
      deps.log.warn({ channelId: channel.channelId, network, details: onchain.details }, 'channel state not read');
      watched.push(channel);
      continue;
    }
    await storeOnchain(deps.db, channel.channelId, onchain.value);
    watched.push({ ...channel, ...onchain.value });
    read.push({ ...channel, ...onchain.value });
  }
  report.watched = watched.length;

  // 2. Claim: each channel up to what we charged, what its voucher covers and what the chain holds.
  const claimable = read
    .filter((channel) => channel.chargedCumulative > channel.totalClaimed && channel.signature)
    .flatMap((channel) => {
      const total = claimTotal(channel);
      const loss = `${channel.channelId}:${total}`;
      if (total < channel.chargedCumulative && !lossesLogged.has(loss)) {
        lossesLogged.add(loss);
        deps.log.error(
          {
            channelId: channel.channelId,
            network,
            charged: String(channel.chargedCumulative),
            balance: String(channel.balance),
            totalClaimed: String(channel.totalClaimed),
            signedMaxClaimable: String(channel.signedMaxClaimable),
          },
          total > channel.totalClaimed
            ? 'channel holds less than we charged: claimed what it holds, the rest is lost'
            : 'channel holds nothing more to claim of what we charged: left out of the claim, the rest is lost',
        );
      }
      return total > channel.totalClaimed ? [{ ...channel, chargedCumulative: total }] : [];
    });
  const unclaimed = claimable.reduce((sum, channel) => sum + (channel.chargedCumulative - channel.totalClaimed), 0n);
  const threshold = microToAsset(
    parseUsdc(deps.config.receiverChannels.claimThresholdUsdc),
    NETWORK_TABLE[network].decimals,
  );
  const now = deps.clock.now().getTime();
  const periodMs = deps.config.receiverChannels.claimPeriodSeconds * 1000;
  const oldest = Math.min(...claimable.map((channel) => channel.lastRequestAt?.getTime() ?? now));
  const reason: ClaimReport['reason'] = force
    ? 'forced'
    : claimable.some((channel) => channel.withdrawRequestedAt > 0)
      ? 'withdrawal'
      : unclaimed >= threshold && unclaimed > 0n
        ? 'threshold'
        : claimable.length > 0 && now - oldest >= periodMs
          ? 'period'
          : undefined;
  if (reason !== undefined && claimable.length > 0) {
    report.reason = reason;
    for (let start = 0; start < claimable.length; start += MAX_CLAIMS_PER_TRANSACTION) {
      const batch = claimable.slice(start, start + MAX_CLAIMS_PER_TRANSACTION);
      const claims: ReceiverClaim[] = batch.map((channel) => ({
        config: channel.config,
        maxClaimableAmount: channel.signedMaxClaimable,
        signature: channel.signature as Hex,
        totalClaimed: channel.chargedCumulative,
      }));
      const amount = batch.reduce((sum, channel) => sum + (channel.chargedCumulative - channel.totalClaimed), 0n);
      const signature = await signClaimBatch(clients, claims);
      const sent = await sendReceiverCall(
        deps,
        network,
        claimCall(claims, signature),
        async (hash) => {
          await recordReceiverTransaction(deps.db, {
            network,
            kind: 'claim',
            txHash: hash,
            channels: batch.length,
            amount,
          });
          return true;
        },
        RECEIPT_TIMEOUT_MS,
      );
      if (!sent.ok) {
        deps.log.error({ network, reason: sent.reason, details: sent.details }, 'channel claim not sent');
        break;
      }
      const state = sent.value.state;
      if (state !== 'pending')
        await markReceiverTransaction(deps.db, sent.value.hash, state === 'confirmed' ? 'confirmed' : 'failed');
      report.claims.push({ hash: sent.value.hash, channels: batch.length, amount, state });
      deps.log.info(
        { network, txHash: sent.value.hash, channels: batch.length, amount: String(amount), state, reason },
        'channels claimed',
      );
      if (state === 'confirmed')
        for (const channel of batch) {
          const onchain = await readChannelOnChain(clients, channel.channelId);
          if (onchain.ok) await storeOnchain(deps.db, channel.channelId, onchain.value);
        }
    }
  }

  // 3. Settle everything claimed for us, per token.
  const tokens = new Set<Address>([clients.usdc, ...watched.map((channel) => channel.config.token)]);
  for (const token of tokens) {
    let owed: bigint;
    try {
      owed = await claimedNotSettled(clients, receiver, token);
    } catch (error) {
      deps.log.warn({ network, token, err: error }, 'claimed total not read');
      continue;
    }
    if (owed <= 0n) continue;
    const sent = await sendReceiverCall(
      deps,
      network,
      settleCall(receiver, token),
      async (hash) => {
        await recordReceiverTransaction(deps.db, { network, kind: 'settle', txHash: hash, channels: 0, amount: owed });
        return true;
      },
      RECEIPT_TIMEOUT_MS,
    );
    if (!sent.ok) {
      deps.log.error({ network, reason: sent.reason, details: sent.details }, 'channel settle not sent');
      continue;
    }
    const state = sent.value.state;
    if (state !== 'pending')
      await markReceiverTransaction(deps.db, sent.value.hash, state === 'confirmed' ? 'confirmed' : 'failed');
    report.settle = { hash: sent.value.hash, amount: owed, state };
    deps.log.info({ network, txHash: sent.value.hash, amount: String(owed), state }, 'claimed channel funds settled');
  }
  return report;
}
