/**
 * /relay to a target that asks for batch-settlement: after the client's payment settled, the
 * target is paid by a voucher on our own channel with it (payments/outgoing/channels.ts). The row
 * names the payment before it leaves (target_scheme batch-settlement, target_payment_ref
 * `channel:<terms>`; the voucher's call_reference is `relay:<id>`), and is ruled as an upto target:
 * the client pays what the seller reports it charged plus the fee, the rest of its payment
 * refunded on its own network; a seller that committed nothing refunds the client in full; a
 * voucher left without an answer is decided later, by the channel's next exchange or the chain,
 * through the relay's follow job (followChannelTarget).
 */
import { recordTargetPayment, type RelayTransaction } from '../../incoming/store';
import { encodePaymentResponseHeader } from '../../x402/headers';
import type { PaymentChoice } from '../../x402/choose';
import type { NetworkName } from '../../basics/networkTable';
import type { CallBudget, PayingDeps } from '../../outgoing/index';
import { chargedMicro, payThroughChannel, voucherFromChain, type PayerVoucher } from '../../outgoing/channels';
import type { Db } from '../../../db/index';
import { deliverUsed, scheduleRefund, watchTargetPayment } from './outcome';
import type { RelayCall, RelayOutcome } from './types';

/** The voucher reference of a relay transaction's payment to its target. */
function relayVoucherReference(id: bigint): string {
  return `relay:${id}`;
}

async function voucherOfRelay(db: Db, id: bigint): Promise<PayerVoucher | undefined> {
  return db
    .selectFrom('payer_vouchers')
    .selectAll()
    .where('call_reference', '=', relayVoucherReference(id))
    .orderBy('id', 'desc')
    .executeTakeFirst();
}

export async function payTargetThroughChannel(
  deps: PayingDeps,
  input: RelayCall,
  row: { id: bigint },
  choice: PaymentChoice,
  clientPayment: string,
  budget: CallBudget,
): Promise<RelayOutcome> {
  const { db, log, config, clock } = deps;
  const ours = { clientPayment };
  const payer = deps.chains.evm.account?.address;
  // Named on the row before the voucher exists: from here on it may leave this process.
  const named =
    payer !== undefined &&
    (await recordTargetPayment(db, row.id, {
      network: choice.network,
      amountMicroUsdc: choice.amountMicroUsdc,
      paymentRef: `channel:${relayVoucherReference(row.id)}`,
      payer,
      validBefore: BigInt(Math.floor(clock.now().getTime() / 1000) + config.relayPaymentWindowSeconds),
      scheme: 'batch-settlement',
    }));
  if (!named) {
    const refund = await scheduleRefund(db, row.id, {
      reason:
        payer === undefined
          ? `the service could not pay the target: no EVM wallet is configured for ${choice.network}`
          : 'the relay was finished by the service before the target was paid',
    });
    return {
      kind: 'bad_gateway',
      message: 'The service could not pay the target; your payment is refunded',
      headers: { ...ours, ...(refund ? { webhookId: refund.webhookId, refundWebhookId: refund.webhookId } : {}) },
    };
  }
  const outcome = await payThroughChannel(deps, {
    call: input.call,
    choice,
    budget,
    callReference: relayVoucherReference(row.id),
  });
  log.info(
    { relayTransactionId: String(row.id), network: choice.network, outcome: outcome.kind },
    'paid target call through a channel (relay)',
  );
  const receipt = (success: boolean, amount?: bigint, errorReason?: string) =>
    encodePaymentResponseHeader({
      success,
      transaction: '',
      network: choice.network,
      payer,
      ...(errorReason ? { errorReason } : {}),
      ...(amount === undefined ? {} : { amount: amount.toString() }),
    });
  switch (outcome.kind) {
    case 'charged': {
      const { refund } = await deliverUsed(db, row.id, {
        targetStatus: outcome.response.status,
        usedMicro: chargedMicro(choice.network, outcome.chargedAtomic),
        fees: { percent: config.relayFeePercent, minUsdc: config.relayFeeMinUsdc },
      });
      return {
        kind: 'pass_through',
        response: outcome.response,
        headers: {
          ...ours,
          paymentResponse: receipt(true, outcome.chargedAtomic),
          ...(refund ? { webhookId: refund.webhookId, refundWebhookId: refund.webhookId } : {}),
        },
      };
    }
    case 'unsigned':
    case 'not_charged': {
      const response = outcome.kind === 'not_charged' ? outcome.response : undefined;
      const refund = await scheduleRefund(db, row.id, {
        reason: `the target was not charged: ${outcome.details}`,
        ...(response ? { targetStatus: response.status } : {}),
        targetNeverCharged: true,
      });
      const headers = {
        ...ours,
        ...(refund ? { webhookId: refund.webhookId, refundWebhookId: refund.webhookId } : {}),
      };
      if (response === undefined || response.status >= 500 || response.status === 402)
        return {
          kind: 'bad_gateway',
          message: `${response ? `The target answered ${response.status}` : 'The target could not be paid'} and charged nothing; your payment is refunded`,
          headers,
        };
      return {
        kind: 'pass_through',
        response,
        headers: { ...headers, paymentResponse: receipt(false, undefined, 'not_charged') },
      };
    }
    case 'unknown': {
      const watched = await watchTargetPayment(db, row.id, {
        ...(outcome.response ? { targetStatus: outcome.response.status } : {}),
      });
      return {
        kind: 'bad_gateway',
        message: `The target gave no usable answer after our voucher was sent (${outcome.details}); your payment is refunded unless the target charged`,
        headers: { ...ours, ...(watched ? { webhookId: watched.webhookId } : {}), serviceStatus: 'payment_validating' },
      };
    }
  }
}

/**
 * The follow job's look at a relay whose target was paid by a voucher: delivered for what the
 * seller committed (the rest refunded), refunded in full when it committed nothing, or looked at
 * again (undefined) while the voucher is unknown and the chain does not decide it.
 */
export async function followChannelTarget(
  deps: Pick<PayingDeps, 'db' | 'chains' | 'config'>,
  row: RelayTransaction,
  requestGone: boolean,
): Promise<string | undefined> {
  const voucher = await voucherOfRelay(deps.db, row.id);
  if (voucher === undefined) {
    // The request may still be waiting for the channel's lock to sign it.
    if (!requestGone) return undefined;
    // Named on the row, never signed (the process stopped in between): nothing left our wallet.
    await scheduleRefund(deps.db, row.id, {
      reason: 'the request ended before its voucher was signed',
      targetNeverCharged: true,
    });
    return 'refund scheduled: no voucher was signed';
  }
  const decided = await voucherFromChain(deps, voucher);
  if (decided.state === 'charged') {
    await deliverUsed(deps.db, row.id, {
      usedMicro: chargedMicro(row.target_network as NetworkName, BigInt(decided.charged_atomic ?? '0')),
      fees: { percent: deps.config.relayFeePercent, minUsdc: deps.config.relayFeeMinUsdc },
    });
    return `the seller charged ${decided.charged_atomic ?? '0'} of our voucher`;
  }
  if (decided.state === 'not_charged') {
    await scheduleRefund(deps.db, row.id, {
      reason: `the target was not charged: ${decided.details ?? 'the seller committed nothing'}`,
      targetNeverCharged: true,
    });
    return 'refund scheduled: the seller committed nothing';
  }
  return undefined;
}
