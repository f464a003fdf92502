/**
 * A paid call to the chat backend (/llm/chat, /llm/translate): the client's X-Payment (x402
 * version 1) or PAYMENT-SIGNATURE (version 2) is verified
 * and recorded as every payment we receive is (payments/incoming/; its nonce can never be used
 * twice), the backend answers, and only then is the payment settled. A failed backend call settles nothing: the record is closed as
 * not settled and the client's authorization simply expires unused. A request that stops half-way
 * leaves a row (mode 'chat') that the chat follow-up job finishes.
 *
 * On the CHANNEL_RECEIVER_NETWORKS networks the 402 also offers `batch-settlement` (./channel.ts):
 * a channel payment holds its channel's lease while the backend answers, and the price is
 * committed on the channel only once it did; a failed backend releases the lease and costs nothing.
 */
import type { Db } from '../../../db/index';
import { chatCompletion, llmConfigured, type ChatMessage } from './llm';
import { parseUsdc } from '../../basics/money';
import { settleableOffers } from '../../incoming/offer';
import { sql } from 'kysely';
import { followUpOpenPayment } from '../../incoming/openPayment';
import { markDelivered, markSettleFailed, claimClientPayment, type RelayTransaction } from '../../incoming/store';
import { completeWebhook, openWebhook, type WebhookOutcome } from '../../tracking/webhooks';
import { settleClientPayment, type SettleFailureReason } from '../../incoming/settle';
import { refundClientPayment } from '../../incoming/refund';
import { verifyClientPaymentHeader } from '../../incoming/verify';
import type { VerifyFailureReason } from '../../chains/types';
import type { ClientPaymentHeader } from '../../incoming/clientPayment';
import type { Deps } from '../../deps';
import type { PaymentRequirements, SettlementResponse } from '../../x402/types';
import { holdIdempotencyClaim, type ClaimRef } from '../../basics/idempotency';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import { receivedPayment } from '../../incoming/clientPayment';
import { commitChannelCharge, releaseChannel } from '../../incoming/channels/receive';
import { LLM_TIMEOUT_MS } from './llm';
import { channelPaymentOf, sellingChannelOffers, sellingNetworkClass, takeChannelPayment } from './channel';
import { channelReceipt } from '../../incoming/channels/offers';

export type PaidChatOutcome =
  | { kind: 'not_configured' }
  /**
   * `reason`: why the request's payment was refused (absent when it carried none); `channelAccepts`
   * the batch-settlement entries offered first in PAYMENT-REQUIRED (corrected with our channel state).
   */
  | {
      kind: 'payment_required';
      accepts: PaymentRequirements[];
      error: string;
      reason?: SettleFailureReason;
      channelAccepts?: PaymentRequirementsV2[];
    }
  | { kind: 'payment_reused'; details: string }
  | { kind: 'verification_unavailable'; details: string }
  | { kind: 'backend_failed'; details: string }
  /**
   * `settlement` in version 1 form; the handler answers it in the version the client paid in.
   * `webhookId`: the record to follow while the payment is not confirmed yet (X-Service-Webhook).
   * No `settlement`: a channel charge that could not be committed after the answer (not charged).
   */
  | { kind: 'answered'; response: string; model: string; settlement?: SettlementResponse; webhookId?: string };

/**
 * Chat is priced in mainnet USDC when the service can be paid on a mainnet network, else on the
 * testnets (a service configured for testnets only). Never both: a testnet payment must not buy
 * what mainnet clients pay for.
 */
async function chatOffers(
  deps: Pick<Deps, 'chains' | 'config'>,
  resource: string,
  description: string,
): Promise<PaymentRequirements[]> {
  return receivingOffers(deps, { resource, description, amountMicroUsdc: parseUsdc(deps.config.llm.priceUsdc) });
}

/** How a payment for what the service sells (a chat answer, credits) is refused, by why its verification failed. */
export function refusedPayment(
  failure: { reason: VerifyFailureReason; details: string },
  accepts: PaymentRequirements[],
):
  | { kind: 'payment_reused'; details: string }
  | { kind: 'verification_unavailable'; details: string }
  | { kind: 'payment_required'; accepts: PaymentRequirements[]; error: string; reason: VerifyFailureReason } {
  if (failure.reason === 'nonce_already_used') return { kind: 'payment_reused', details: failure.details };
  if (failure.reason === 'rpc_unavailable') return { kind: 'verification_unavailable', details: failure.details };
  return { kind: 'payment_required', accepts, error: `${failure.reason}: ${failure.details}`, reason: failure.reason };
}

/**
 * The 402 of what the service sells itself (a chat answer, credits): `amountMicroUsdc` on its
 * mainnet networks when it can be paid on one, else on its testnets.
 */
export async function receivingOffers(
  deps: Pick<Deps, 'chains' | 'config'>,
  { resource, description, amountMicroUsdc }: { resource: string; description: string; amountMicroUsdc: bigint },
): Promise<PaymentRequirements[]> {
  const { chains, config } = deps;
  if (!chains.networks.some((network) => network.serviceAddress !== undefined)) return [];
  const networkClass = sellingNetworkClass(chains);
  const request = { networkClass, amountMicroUsdc, resource, description, mimeType: 'application/json' } as const;
  return settleableOffers(chains, request, config.facilitatorUrl, config.facilitatorAuth);
}

/**
 * The client has its answer and its payment is not confirmed yet (a settlement under way, or a
 * facilitator that did not say it settled): a payment that settles later was for something
 * delivered. The record the client is told to follow is opened with the mark, once.
 */
async function markAnsweredPending(db: Db, relayTxId: bigint, network: string): Promise<string> {
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .selectFrom('relay_transactions')
      .select('webhook_id')
      .where('id', '=', relayTxId)
      .forUpdate()
      .executeTakeFirstOrThrow();
    const webhookId =
      row.webhook_id ??
      (await openWebhook(tx, {
        kind: 'relay_payment',
        network,
        message:
          'You have the answer; your payment is not confirmed on-chain yet. It is kept once the chain shows it, and nothing is charged if it can no longer land.',
        relayTxId,
      }));
    await tx
      .updateTable('relay_transactions')
      .set({ webhook_id: webhookId, responded_at: sql<Date>`coalesce(responded_at, now())` })
      .where('id', '=', relayTxId)
      .execute();
    return webhookId;
  });
}

/** Ends the record of an answered chat whose payment was followed up, if one was opened. */
async function endChatRecord(db: Db, row: RelayTransaction, outcome: WebhookOutcome): Promise<void> {
  const webhookId = row.webhook_id;
  if (webhookId === null) return;
  await db.transaction().execute((tx) => completeWebhook(tx, webhookId, outcome));
}

/**
 * A chat payment still open this long after it was taken has lost its request (the model's bound
 * is far shorter); one whose answer was given (its settlement not confirmed then) is followed at once.
 */
export const CHAT_ABANDONED_AFTER_MS = 10 * 60_000;

export type ChatFollowUp =
  'closed_unsettled' | 'delivered' | 'refunded' | 'refund_pending' | 'refund_failed' | 'still_pending';

/**
 * Finishes a chat payment its request left open: never settled -> closed, nothing moved; settled
 * for an answer that was given -> delivered; settled without an answer (the process stopped in
 * between) -> refunded to the payer. Safe to repeat.
 */
export async function followUpChatPayment(
  deps: Pick<Deps, 'db' | 'chains' | 'submissions' | 'paymentBounds'>,
  relayTxId: bigint,
): Promise<ChatFollowUp> {
  const refund = async (): Promise<ChatFollowUp> => {
    const outcome = await refundClientPayment(deps.db, relayTxId, deps);
    return outcome.kind === 'refunded' ? 'refunded' : outcome.kind === 'pending' ? 'refund_pending' : 'refund_failed';
  };
  // Only rows open past CHAT_ABANDONED_AFTER_MS are followed up: their request is over.
  return followUpOpenPayment<ChatFollowUp>(deps, relayTxId, {
    mode: 'chat',
    missing: () => 'still_pending',
    abandonedDetails: 'the request stopped before settlement; nothing was settled',
    settlementPending: () => 'still_pending',
    neverSettled: async (row): Promise<ChatFollowUp> => {
      await endChatRecord(deps.db, row, {
        status: 'payment_failed',
        network: row.network,
        error: `${row.failure_reason ?? 'settle_failed'}: ${row.failure_details ?? ''}`.slice(0, 2000),
        message: 'Your payment was not settled on-chain; nothing was charged and nothing needs refunding',
      });
      return 'closed_unsettled';
    },
    settled: async (row): Promise<ChatFollowUp> => {
      if (row.responded_at === null) return refund();
      await markDelivered(deps.db, relayTxId);
      await endChatRecord(deps.db, row, {
        status: 'success',
        network: row.network,
        ...(row.client_tx_hash ? { txHash: row.client_tx_hash } : {}),
        message: 'Your payment settled, for the answer you were given',
      });
      return 'delivered';
    },
    inState: { refund_pending: refund },
    otherwise: () => 'delivered',
  });
}

/** Chat payments open past CHAT_ABANDONED_AFTER_MS. */
export async function openChatPayments(db: Db, now: Date, limit: number): Promise<bigint[]> {
  const rows = await db
    .selectFrom('relay_transactions')
    .select('id')
    .where('mode', '=', 'chat')
    .where('state', 'in', ['received', 'settling', 'settled', 'refund_pending'])
    .where((eb) =>
      eb.or([
        eb('created_at', '<', new Date(now.getTime() - CHAT_ABANDONED_AFTER_MS)),
        eb('responded_at', 'is not', null),
      ]),
    )
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map((row) => row.id);
}

export async function paidChat(
  deps: Pick<Deps, 'db' | 'config' | 'chains' | 'clock' | 'submissions' | 'paymentBounds' | 'log'>,
  request: {
    /** X-Payment or PAYMENT-SIGNATURE as the request carried it, if it carried one. */
    payment: ClientPaymentHeader | undefined;
    resource: string;
    description: string;
    messages: ChatMessage[];
    maxTokens?: number;
    temperature?: number;
    /** The idempotency record's claim the call runs under (a keyed chat): the payment's row carries it. */
    idempotency?: ClaimRef;
  },
): Promise<PaidChatOutcome> {
  if (!llmConfigured(deps.config)) return { kind: 'not_configured' };
  const accepts = await chatOffers(deps, request.resource, request.description);
  const channelAccepts = sellingChannelOffers(deps, accepts, parseUsdc(deps.config.llm.priceUsdc));
  if (request.payment === undefined || request.payment.value === '') {
    return { kind: 'payment_required', accepts, error: 'Payment Required', channelAccepts };
  }
  const decoded = receivedPayment(request.payment).decoded;
  const channelPayment = decoded.ok ? channelPaymentOf(decoded.value) : undefined;
  if (channelPayment) return channelChat(deps, request, { accepts, channelAccepts, payment: channelPayment });
  const verified = await verifyClientPaymentHeader(request.payment, accepts, deps);
  if (!verified.ok) return refusedPayment(verified, accepts);
  const chatRequest = { targetUrl: request.resource, targetMethod: 'POST', mode: 'chat' } as const;
  const { idempotency } = request;
  // Under an idempotency record the claim is held first: the payment is recorded only while it is the record's.
  const recorded = idempotency
    ? await deps.db.transaction().execute(async (tx) => {
        await holdIdempotencyClaim(tx, idempotency);
        return claimClientPayment(tx, verified.value, { ...chatRequest, idempotencyClaim: idempotency.claim });
      })
    : await claimClientPayment(deps.db, verified.value, chatRequest);
  if (!recorded.ok) return { kind: 'payment_reused', details: recorded.details };
  const relayTxId = recorded.value.id;

  const answer = await chatCompletion(deps.config, {
    messages: request.messages,
    maxTokens: request.maxTokens,
    temperature: request.temperature,
  });
  if (!answer.ok) {
    await markSettleFailed(deps.db, relayTxId, 'service_failed', `not settled: ${answer.details}`);
    return { kind: 'backend_failed', details: answer.details };
  }

  // Settled as relayed payments are (through FACILITATOR_URL when deps.config names one).
  const settlement = await settleClientPayment(deps.db, relayTxId, deps);
  if (settlement.kind === 'failed') {
    // The chain shows nothing moved (a facilitator's word alone is never taken for it): the client
    // is asked to pay again, as any x402 server does after a failed settlement.
    return {
      kind: 'payment_required',
      accepts,
      error: `${settlement.reason}: ${settlement.details}`,
      reason: settlement.reason,
    };
  }
  if (settlement.kind === 'settled') await markDelivered(deps.db, relayTxId);
  // Still pending: the answer is given now with the record to follow, and the chat follow-up job
  // delivers the row once the chain shows the payment, or closes it once it can no longer land.
  const webhookId =
    settlement.kind === 'settled' ? undefined : await markAnsweredPending(deps.db, relayTxId, verified.value.network);
  const receipt: SettlementResponse = {
    success: settlement.kind === 'settled',
    transaction: settlement.txHash ?? '',
    network: verified.value.network,
    payer: verified.value.payer,
  };
  return {
    kind: 'answered',
    response: answer.value.response,
    model: answer.value.model,
    settlement: receipt,
    ...(webhookId === undefined ? {} : { webhookId }),
  };
}

/**
 * A chat paid through a channel: the backend is called under the channel's lease, and the price
 * committed only once it answered. No relay transaction row: the charge is a row of
 * receiver_channel_charges.
 */
async function channelChat(
  deps: Parameters<typeof paidChat>[0],
  request: Parameters<typeof paidChat>[1],
  {
    accepts,
    channelAccepts,
    payment,
  }: {
    accepts: PaymentRequirements[];
    channelAccepts: PaymentRequirementsV2[];
    payment: NonNullable<ReturnType<typeof channelPaymentOf>>;
  },
): Promise<PaidChatOutcome> {
  // The lease outlives the backend's own bound, so that no second request is served while this one may still be.
  const taken = await takeChannelPayment(deps, payment, channelAccepts, { leaseMs: LLM_TIMEOUT_MS + 30_000 });
  if (taken.kind === 'unavailable') return { kind: 'verification_unavailable', details: taken.details };
  if (taken.kind === 'refused')
    return {
      kind: 'payment_required',
      accepts,
      error: taken.error,
      reason: taken.reason,
      channelAccepts: taken.offers,
    };
  const { reservation } = taken;
  const release = () => releaseChannel(deps, reservation.channelId, reservation.pendingId);
  let answer: Awaited<ReturnType<typeof chatCompletion>>;
  try {
    answer = await chatCompletion(deps.config, {
      messages: request.messages,
      maxTokens: request.maxTokens,
      temperature: request.temperature,
    });
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
  if (!answer.ok) {
    await release();
    return { kind: 'backend_failed', details: answer.details };
  }
  const committed = await commitChannelCharge(deps, reservation, request.resource);
  if (!committed.ok)
    deps.log.error(
      { channelId: reservation.channelId, code: committed.refusal.code, details: committed.refusal.details },
      'channel charge not committed after the chat backend answered',
    );
  return {
    kind: 'answered',
    response: answer.value.response,
    model: answer.value.model,
    ...(committed.ok ? { settlement: channelReceipt(reservation, committed) } : {}),
  };
}

/**
 * Whether a payment would be accepted for a chat now, without recording or settling it: the proof
 * a repeat under a key gives when it carries another payment than the first call's. Undefined when
 * it verifies; else the refusal paidChat would answer.
 */
export async function checkChatPayment(
  deps: Pick<Deps, 'config' | 'chains' | 'clock' | 'paymentBounds'>,
  request: { payment: ClientPaymentHeader; resource: string; description: string },
): Promise<Exclude<PaidChatOutcome, { kind: 'answered' }> | undefined> {
  if (!llmConfigured(deps.config)) return { kind: 'not_configured' };
  const accepts = await chatOffers(deps, request.resource, request.description);
  const verified = await verifyClientPaymentHeader(request.payment, accepts, deps);
  return verified.ok ? undefined : refusedPayment(verified, accepts);
}
