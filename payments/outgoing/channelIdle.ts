/**
 * Giving back our idle payer channels (payments/outgoing/channels.ts pays targets through them).
 * A channel unused for PAYER_CHANNEL_IDLE_SECONDS, with no voucher left undecided, holds money of
 * ours in the x402BatchSettlement contract that no call needs. Each run of the worker task
 * (worker/tasks/payerChannelIdle.ts):
 *
 * 1. Under the channel's lock (the one every call on its terms takes, so no voucher is signed
 *    meanwhile) the channel becomes `closing`, with the refund request recorded before it leaves:
 *    from then on a call to the same terms opens a new channel. The seller is asked for a
 *    cooperative refund as x402 batch-settlement specifies (as @x402/evm's client `refundChannel`
 *    does): the resource our last voucher paid for is probed for its 402, and a `refund` payload (a
 *    zero-charge voucher at our cumulative charge) is sent to it; the seller's facilitator runs
 *    refundWithSignature, which pays the balance less its charges back to our wallet.
 * 2. Whatever the seller answered, the chain decides: what is ours there (the balance less what
 *    the seller charged or claimed) is zero, and the channel is `closed`; else our wallet calls
 *    initiateWithdraw for it (hash stored before broadcast), and once the withdrawDelay has passed
 *    by the chain's clock, finalizeWithdraw. Every `closing` channel is looked at again each run, so
 *    a step that failed, or a crash between two, is taken up again by the next one.
 *
 * Until it is `closed` the channel's balance counts in our float (payments/tracking/float.ts).
 */
import type { Updateable } from 'kysely';
import { TransactionNotFoundError, type Hash, type Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { Db } from '../../db/index';
import type { PayerChannelsTable, PayerTxState } from '../../db/schema';
import type { Deps } from '../deps';
import { caip2Of, type NetworkName } from '../basics/networkTable';
import { buildTargetRequest, type TargetResponse } from '../basics/http/index';
import { fail, ok, type Result } from '../basics/result';
import type { EvmNetworkClients } from '../chains/evm/clients';
import { readReceipt } from '../chains/evm/submit';
import { channelTerms, signChannelPayment } from '../chains/evm/batchSettlement/payer';
import { chainSeconds, finalizeWithdrawCall, initiateWithdrawCall } from '../chains/evm/batchSettlement/payerWithdraw';
import { readChannelOnChain, sendReceiverCall } from '../chains/evm/batchSettlement/receiverChain';
import type { OfferV2 } from '../x402/parse';
import { ourPaymentId } from '../x402/extensions';
import { callBudget, callTarget, paymentRequiredOf } from './call';
import { configOf, sellerReceiptOf, underPayerChannelLock, type PayerChannel } from './channels';
import { paymentSignatureHeader } from './pay';

export type ChannelIdleDeps = Pick<
  Deps,
  'db' | 'chains' | 'config' | 'log' | 'clock' | 'resolver' | 'connections' | 'submissions'
>;

/** Channels of each kind (idle, closing) looked at per run; the next run takes the rest. */
export const IDLE_CHANNELS_PER_RUN = 50;
/** The bound of each request to the seller (the probe, the refund). */
export const REFUND_REQUEST_TIMEOUT_MS = 30_000;
/** How long a run waits for the receipt of one of our transactions; a later run reads it. */
export const RECEIPT_WAIT_MS = 30_000;

/** What a run did with one channel. */
export interface IdleChannelStep {
  channelId: string;
  network: string;
  step:
    | 'refunded'
    | 'refund_refused'
    | 'withdraw_started'
    | 'withdraw_waiting'
    | 'withdrawn'
    | 'closed'
    | 'pending_transaction'
    | 'skipped'
    | 'failed';
  details: string;
}

async function channelRow(db: Db, channelId: string): Promise<PayerChannel | undefined> {
  return db.selectFrom('payer_channels').selectAll().where('channel_id', '=', channelId).executeTakeFirst();
}

/** One run: idle open channels are given back, closing ones taken a step further. */
export async function giveBackIdleChannels(deps: ChannelIdleDeps): Promise<IdleChannelStep[]> {
  const idleBefore = new Date(deps.clock.now().getTime() - deps.config.payerChannelIdleSeconds * 1000);
  const idle = await deps.db
    .selectFrom('payer_channels')
    .selectAll()
    .where('state', '=', 'open')
    .where('last_used_at', '<', idleBefore)
    .orderBy('last_used_at')
    .limit(IDLE_CHANNELS_PER_RUN)
    .execute();
  const steps: IdleChannelStep[] = [];
  const guarded = async (channel: PayerChannel, step: () => Promise<IdleChannelStep>) => {
    try {
      steps.push(await step());
    } catch (error) {
      const details = error instanceof Error ? error.message : String(error);
      deps.log.warn(
        { channelId: channel.channel_id, network: channel.network, err: error },
        'idle channel: step failed; tried again next period',
      );
      steps.push({ channelId: channel.channel_id, network: channel.network, step: 'failed', details });
    }
  };
  for (const channel of idle) await guarded(channel, () => askRefund(deps, channel, idleBefore));
  const closing = await deps.db
    .selectFrom('payer_channels')
    .selectAll()
    .where('state', '=', 'closing')
    .orderBy('channel_id')
    .limit(IDLE_CHANNELS_PER_RUN)
    .execute();
  // A channel idle above has been taken as far as it goes in this run.
  const handled = new Set(idle.map((channel) => channel.channel_id));
  for (const channel of closing)
    if (!handled.has(channel.channel_id)) await guarded(channel, () => advanceClosing(deps, channel));
  return steps;
}

/** The resource our channel last paid for (a charged voucher first), and its method: where a refund is asked. */
async function refundTargetOf(db: Db, channelId: string): Promise<{ url: string; method: string } | undefined> {
  const voucher = await db
    .selectFrom('payer_vouchers')
    .select(['call_reference'])
    .where('channel_id', '=', channelId)
    .where('call_reference', 'is not', null)
    .orderBy((eb) => eb.case().when('state', '=', 'charged').then(0).else(1).end())
    .orderBy('id', 'desc')
    .executeTakeFirst();
  const reference = voucher?.call_reference;
  if (!reference) return undefined;
  const relayId = /^relay:([0-9]{1,19})$/.exec(reference)?.[1];
  if (relayId !== undefined) {
    const row = await db
      .selectFrom('relay_transactions')
      .select(['target_url', 'target_method'])
      .where('id', '=', BigInt(relayId))
      .executeTakeFirst();
    return row?.target_url ? { url: row.target_url, method: row.target_method ?? 'GET' } : undefined;
  }
  const row = await db
    .selectFrom('proxy_payments')
    .select('target_url')
    .where('reference', '=', reference)
    .executeTakeFirst();
  return row ? { url: row.target_url, method: 'GET' } : undefined;
}

/**
 * The channel's vouchers still undecided once nothing of ours is left in it: the seller can claim
 * nothing more, so the chain's final claimed total decides each (charged up to its increment when
 * it reaches the voucher's ceiling, never committed otherwise). The payments they paid for follow
 * (the /proxy watch job and the relay's follow job read the voucher).
 */
async function decideAtClose(deps: ChannelIdleDeps, channelId: string, totalClaimed: bigint): Promise<void> {
  const open = await deps.db
    .selectFrom('payer_vouchers')
    .select(['id', 'base_atomic', 'ceiling_atomic'])
    .where('channel_id', '=', channelId)
    .where('state', 'in', ['sent', 'unknown'])
    .execute();
  for (const voucher of open) {
    const base = BigInt(voucher.base_atomic);
    const ceiling = BigInt(voucher.ceiling_atomic);
    const committed = totalClaimed >= ceiling;
    await deps.db
      .updateTable('payer_vouchers')
      .set({
        state: committed ? 'charged' : 'not_charged',
        charged_atomic: committed ? ceiling - base : null,
        resolved_at: new Date(),
        details: committed
          ? `the channel closed with ${totalClaimed} claimed, covering this voucher's ceiling`
          : `the channel closed with ${totalClaimed} claimed, below this voucher's ceiling: never committed`,
      })
      .where('id', '=', voucher.id)
      .where('state', 'in', ['sent', 'unknown'])
      .execute();
    deps.log.info(
      { channelId, voucherId: String(voucher.id), committed },
      'idle channel: an undecided voucher decided by the channel closing',
    );
  }
}

/**
 * Step 1, under the channel's lock: still open, still idle: it becomes `closing` with the refund
 * request recorded, then the seller is asked. The chain decides the rest
 * (advanceClosing, run at once after).
 */
async function askRefund(deps: ChannelIdleDeps, candidate: PayerChannel, idleBefore: Date): Promise<IdleChannelStep> {
  const ids = { channelId: candidate.channel_id, network: candidate.network };
  const asked = await underPayerChannelLock(deps.db, candidate, async (): Promise<IdleChannelStep | undefined> => {
    const channel = await channelRow(deps.db, candidate.channel_id);
    if (channel?.state !== 'open' || channel.last_used_at >= idleBefore)
      return { ...ids, step: 'skipped', details: 'the channel was used or closed meanwhile' };
    // A voucher whose answer was lost (unknown) does not keep the channel open: no call will come
    // to decide it, and the channel's end does (decideAtClose).
    const clients = deps.chains.evm.networks.get(channel.network as NetworkName);
    const account = deps.chains.evm.account;
    if (!clients || !account)
      return { ...ids, step: 'skipped', details: `no EVM wallet is configured for ${channel.network}` };
    const onChain = await readChannelOnChain(clients, channel.channel_id as Hex);
    if (!onChain.ok) return { ...ids, step: 'failed', details: onChain.details };
    const charged = BigInt(channel.charged_atomic);
    const sellers = onChain.value.totalClaimed > charged ? onChain.value.totalClaimed : charged;
    // Nothing of ours left (the seller claimed it all): nothing to ask for, the channel is just closed.
    const target = onChain.value.balance > sellers ? await refundTargetOf(deps.db, channel.channel_id) : undefined;
    const idleSince = `idle since ${channel.last_used_at.toISOString()}`;
    await deps.db
      .updateTable('payer_channels')
      .set({
        state: 'closing',
        refund_requested_at: target ? new Date() : null,
        refund_url: target?.url ?? null,
        closing_details: target
          ? `${idleSince}: a cooperative refund was asked of the seller`
          : onChain.value.balance > sellers
            ? `${idleSince}: no resource of the seller is known to ask a refund of`
            : `${idleSince}: nothing of ours is left in it`,
      })
      .where('channel_id', '=', channel.channel_id)
      .where('state', '=', 'open')
      .execute();
    deps.log.info(
      { ...ids, lastUsedAt: channel.last_used_at.toISOString(), refundUrl: target?.url },
      'idle channel: closing; no call signs on it again',
    );
    if (!target) return undefined;
    const refund = await requestRefund(deps, { account, clients }, channel, target);
    if (!refund.ok) {
      await note(deps.db, channel.channel_id, `the seller did not refund: ${refund.details}`);
      deps.log.warn({ ...ids, details: refund.details }, 'idle channel: the seller did not refund; we withdraw');
      return undefined;
    }
    await deps.db
      .updateTable('payer_channels')
      .set({ refund_tx_hash: refund.value.transaction || null, closing_details: 'the seller answered the refund' })
      .where('channel_id', '=', channel.channel_id)
      .execute();
    deps.log.info({ ...ids, transaction: refund.value.transaction }, 'idle channel: the seller answered the refund');
    return undefined;
  });
  if (asked) {
    if (asked.step === 'skipped') deps.log.info({ ...ids, details: asked.details }, 'idle channel: left open');
    return asked;
  }
  return advanceClosing(deps, candidate);
}

async function note(db: Db, channelId: string, details: string): Promise<void> {
  await db
    .updateTable('payer_channels')
    .set({ closing_details: details.slice(0, 1000) })
    .where('channel_id', '=', channelId)
    .execute();
}

/** The seller's offer for this very channel's terms in its 402, or why there is none. */
function offerForChannel(response: TargetResponse, channel: PayerChannel): Result<OfferV2, 'no_offer'> {
  const required = paymentRequiredOf(response);
  if (required?.x402Version !== 2)
    return fail('no_offer', `the seller's resource answered ${response.status} without an x402 version 2 402`);
  const network = caip2Of(channel.network as NetworkName);
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  const offer = required.offers.find((candidate) => {
    if (candidate.accepted.scheme !== 'batch-settlement' || candidate.accepted.network !== network) return false;
    const terms = channelTerms(candidate.accepted);
    return (
      terms.ok &&
      same(terms.receiver, channel.receiver) &&
      same(terms.receiverAuthorizer, channel.receiver_authorizer) &&
      same(terms.token, channel.token) &&
      terms.withdrawDelay === channel.withdraw_delay
    );
  });
  return offer ? ok(offer) : fail('no_offer', "the seller no longer offers this channel's terms");
}

/**
 * The cooperative refund as @x402/evm's client asks it: the resource probed without payment for
 * its 402, then sent a `refund` payload (our voucher at the cumulative charge, no amount: all of
 * the rest). Success is the seller's PAYMENT-RESPONSE saying so; the chain is read afterwards.
 */
async function requestRefund(
  deps: ChannelIdleDeps,
  { account, clients }: { account: PrivateKeyAccount; clients: EvmNetworkClients },
  channel: PayerChannel,
  target: { url: string; method: string },
): Promise<Result<{ transaction: string }, 'no_answer' | 'no_offer' | 'refused'>> {
  const send = async (paymentHeader?: string) => {
    const built = buildTargetRequest(
      { api_url: target.url, method: target.method },
      paymentHeader ? { paymentHeader, paymentVersion: 2 } : {},
    );
    if (!built.ok) return built;
    return callTarget(built.value, callBudget(REFUND_REQUEST_TIMEOUT_MS), deps);
  };
  const probe = await send();
  if (!probe.ok) return fail('no_answer', `the seller's resource could not be reached: ${probe.details}`);
  const offer = offerForChannel(probe.value, channel);
  if (!offer.ok) return offer;
  const voucher = await signChannelPayment(account, clients, offer.value.accepted, configOf(channel), {
    ceiling: BigInt(channel.charged_atomic),
  });
  const payload = { type: 'refund', channelConfig: voucher.channelConfig, voucher: voucher.voucher };
  const header = paymentSignatureHeader(
    offer.value,
    payload as unknown as Parameters<typeof paymentSignatureHeader>[1],
    ourPaymentId(channel.network, `refund:${channel.channel_id}`),
  );
  const answer = await send(header);
  if (!answer.ok) return fail('no_answer', `no answer to the refund: ${answer.details}`);
  const settled = sellerReceiptOf(answer.value);
  if (answer.value.status >= 400 || !settled?.success)
    return fail(
      'refused',
      `the seller answered ${answer.value.status}${settled?.errorReason ? ` (${settled.errorReason})` : ''}`,
    );
  return ok({ transaction: settled.transaction });
}

/**
 * The outcome of one of our transactions recorded `sent`, from its receipt; one the node does not
 * know at all was dropped and counts as `reverted` (sent again only if the chain still needs it:
 * the contract refuses a second withdrawal or finalization, so a duplicate can move nothing).
 */
async function receiptState(
  deps: ChannelIdleDeps,
  clients: EvmNetworkClients,
  network: NetworkName,
  hash: string,
): Promise<PayerTxState | undefined> {
  const receipt = await readReceipt(deps, network, hash as Hash);
  if (!receipt.ok) return undefined;
  if (receipt.value.status === 'success') return 'confirmed';
  if (receipt.value.status === 'reverted') return 'reverted';
  try {
    await clients.publicClient.getTransaction({ hash: hash as Hash });
    return 'sent';
  } catch (error) {
    return error instanceof TransactionNotFoundError ? 'reverted' : undefined;
  }
}

/**
 * Step 2, under the channel's lock: the chain says what is ours in the channel (its balance less
 * what the seller charged or claimed). Nothing: closed. Else our transactions take it back:
 * initiateWithdraw, then finalizeWithdraw once the delay has passed by the chain's clock.
 */
async function advanceClosing(deps: ChannelIdleDeps, candidate: PayerChannel): Promise<IdleChannelStep> {
  const ids = { channelId: candidate.channel_id, network: candidate.network };
  const network = candidate.network as NetworkName;
  return underPayerChannelLock(deps.db, candidate, async (): Promise<IdleChannelStep> => {
    const found = await channelRow(deps.db, candidate.channel_id);
    if (found?.state !== 'closing') return { ...ids, step: 'skipped', details: 'the channel is not closing' };
    let channel: PayerChannel = found;
    const clients = deps.chains.evm.networks.get(network);
    if (!clients) return { ...ids, step: 'skipped', details: `${network} is not an enabled EVM network` };
    const db = deps.db;
    const set = async (values: Updateable<PayerChannelsTable>) => {
      channel = await db
        .updateTable('payer_channels')
        .set(values)
        .where('channel_id', '=', candidate.channel_id)
        .returningAll()
        .executeTakeFirstOrThrow();
    };

    // Our transactions sent before: their receipts first (a crash may have come between).
    for (const kind of ['withdraw', 'finalize'] as const) {
      const hash = channel[`${kind}_tx_hash`];
      if (channel[`${kind}_tx_state`] !== 'sent' || hash === null) continue;
      const state = await receiptState(deps, clients, network, hash);
      if (state === undefined || state === 'sent')
        return { ...ids, step: 'pending_transaction', details: `our ${kind} transaction ${hash} is not mined yet` };
      await set(kind === 'withdraw' ? { withdraw_tx_state: state } : { finalize_tx_state: state });
      deps.log.info({ ...ids, hash, state }, `idle channel: our ${kind} transaction ${state}`);
    }

    /** What the chain says is ours in the channel: its balance less what the seller charged or claimed. */
    const readOurs = async () => {
      const read = await readChannelOnChain(clients, candidate.channel_id as Hex);
      if (!read.ok) return read;
      const charged = BigInt(channel.charged_atomic);
      const sellers = read.value.totalClaimed > charged ? read.value.totalClaimed : charged;
      await set({
        balance_atomic: read.value.balance,
        total_claimed_atomic: read.value.totalClaimed,
        synced_at: new Date(),
      });
      return ok({ ...read.value, sellers, ours: read.value.balance > sellers ? read.value.balance - sellers : 0n });
    };
    const close = async (onChain: {
      balance: bigint;
      totalClaimed: bigint;
      sellers: bigint;
    }): Promise<IdleChannelStep> => {
      const how =
        channel.finalize_tx_state === 'confirmed'
          ? 'withdrawn'
          : channel.withdraw_tx_state === null && channel.refund_requested_at !== null
            ? 'refunded'
            : 'closed';
      await decideAtClose(deps, candidate.channel_id, onChain.totalClaimed);
      await set({
        state: 'closed',
        closed_at: new Date(),
        closing_details: `nothing of ours is left in the channel (balance ${onChain.balance}, the seller's part ${onChain.sellers}): ${how}`,
      });
      deps.log.info(
        { ...ids, balance: String(onChain.balance), totalClaimed: String(onChain.totalClaimed), how },
        'idle channel: closed, its balance is back in our wallet',
      );
      return { ...ids, step: how, details: `closed: balance ${onChain.balance}, claimed ${onChain.totalClaimed}` };
    };

    const read = await readOurs();
    if (!read.ok) return { ...ids, step: 'failed', details: read.details };
    const onChain = read.value;
    const { ours } = onChain;
    if (ours === 0n) return close(onChain);

    if (onChain.withdrawRequestedAt === 0) {
      // No withdrawal pending on chain: ours is taken back by a new one (a refund that lands later
      // lowers it; finalizeWithdraw pays at most what is unclaimed then).
      const sent = await sendReceiverCall(
        deps,
        network,
        initiateWithdrawCall(configOf(channel), ours),
        async (hash) => {
          const row = await db
            .updateTable('payer_channels')
            .set({
              withdraw_amount_atomic: ours,
              withdraw_tx_hash: hash,
              withdraw_tx_state: 'sent',
              withdraw_finalize_after: null,
              finalize_tx_hash: null,
              finalize_tx_state: null,
            })
            .where('channel_id', '=', candidate.channel_id)
            .where('state', '=', 'closing')
            .executeTakeFirst();
          return row.numUpdatedRows === 1n;
        },
        RECEIPT_WAIT_MS,
      );
      if (!sent.ok) {
        await note(db, candidate.channel_id, `initiateWithdraw could not be sent: ${sent.details}`);
        deps.log.warn(
          { ...ids, reason: sent.reason, details: sent.details },
          'idle channel: initiateWithdraw not sent',
        );
        return { ...ids, step: 'failed', details: sent.details };
      }
      const { hash, state } = sent.value;
      if (state === 'pending') {
        deps.log.info({ ...ids, hash, amount: String(ours) }, 'idle channel: initiateWithdraw sent, not mined yet');
        return { ...ids, step: 'pending_transaction', details: `initiateWithdraw ${hash} is not mined yet` };
      }
      if (state === 'reverted') {
        await set({ withdraw_tx_state: 'reverted', closing_details: `initiateWithdraw ${hash} reverted` });
        deps.log.warn({ ...ids, hash }, 'idle channel: initiateWithdraw reverted; tried again next period');
        return { ...ids, step: 'failed', details: `initiateWithdraw ${hash} reverted` };
      }
      const after = await readChannelOnChain(clients, channel.channel_id as Hex);
      const finalizeAfter = after.ok ? BigInt(after.value.withdrawRequestedAt + channel.withdraw_delay) : null;
      await set({
        withdraw_tx_state: 'confirmed',
        withdraw_finalize_after: finalizeAfter,
        closing_details: `withdrawal of ${ours} started (${hash})`,
      });
      deps.log.info(
        { ...ids, hash, amount: String(ours), finalizeAfter: finalizeAfter?.toString() },
        'idle channel: withdrawal started; finalized once the delay has passed',
      );
      return { ...ids, step: 'withdraw_started', details: `initiateWithdraw of ${ours}: ${hash}` };
    }

    const finalizeAfter = BigInt(onChain.withdrawRequestedAt + channel.withdraw_delay);
    if (channel.withdraw_finalize_after !== finalizeAfter) await set({ withdraw_finalize_after: finalizeAfter });
    const now = await chainSeconds(clients);
    if (now < finalizeAfter) {
      deps.log.info(
        { ...ids, finalizeAfter: finalizeAfter.toString(), secondsLeft: String(finalizeAfter - now) },
        'idle channel: withdrawal waiting for its delay',
      );
      return {
        ...ids,
        step: 'withdraw_waiting',
        details: `finalizeWithdraw from ${finalizeAfter} (chain time ${now})`,
      };
    }
    const sent = await sendReceiverCall(
      deps,
      network,
      finalizeWithdrawCall(configOf(channel)),
      async (hash) => {
        const row = await db
          .updateTable('payer_channels')
          .set({ finalize_tx_hash: hash, finalize_tx_state: 'sent' })
          .where('channel_id', '=', candidate.channel_id)
          .where('state', '=', 'closing')
          .executeTakeFirst();
        return row.numUpdatedRows === 1n;
      },
      RECEIPT_WAIT_MS,
    );
    if (!sent.ok) {
      await note(db, candidate.channel_id, `finalizeWithdraw could not be sent: ${sent.details}`);
      deps.log.warn({ ...ids, reason: sent.reason, details: sent.details }, 'idle channel: finalizeWithdraw not sent');
      return { ...ids, step: 'failed', details: sent.details };
    }
    const { hash, state } = sent.value;
    if (state !== 'confirmed') {
      if (state === 'reverted') await set({ finalize_tx_state: 'reverted' });
      deps.log.warn({ ...ids, hash, state }, `idle channel: finalizeWithdraw ${state}; looked at again next period`);
      return {
        ...ids,
        step: state === 'pending' ? 'pending_transaction' : 'failed',
        details: `finalizeWithdraw ${hash} ${state}`,
      };
    }
    await set({ finalize_tx_state: 'confirmed', closing_details: `withdrawal finalized (${hash})` });
    deps.log.info({ ...ids, hash }, 'idle channel: withdrawal finalized');
    // Read again: closed when nothing is left (else the next run withdraws what still is ours).
    const final = await readOurs();
    if (final.ok && final.value.ours === 0n) return close(final.value);
    return {
      ...ids,
      step: 'withdraw_waiting',
      details: `finalizeWithdraw ${hash}; some of ours is still in the channel`,
    };
  });
}
