/**
 * POST /proxy to a target paid through a batch-settlement channel (payments/outgoing/channels.ts):
 * the credits for the price plus the fee are held and the row written (scheme batch-settlement,
 * ruled as upto) in the statement that records the signed voucher, before it leaves (under an
 * idempotency record, on their own just before); the seller's answer then charges what it reports
 * it charged (at most the price) plus the fee on it and releases the rest, in the statement that
 * records that answer, or releases everything when it committed nothing. A voucher left without
 * an answer keeps its credits held, and the watch job decides it
 * (worker/tasks/proxyPaymentWatch.ts: the channel's next exchange or the chain).
 */
import { sql } from 'kysely';
import { proxyCredits, uptoProxyCharge } from '../../accounts/fees';
import { randomNonce } from '../../chains/evm';
import type { NetworkName } from '../../basics/networkTable';
import {
  chargedMicro,
  payThroughChannel,
  type AnswerAlong,
  type PayerVoucher,
  type VoucherAdmission,
} from '../../outgoing/channels';
import type { CallBudget, PayingDeps } from '../../outgoing/index';
import { encodePaymentResponseHeader } from '../../x402/headers';
import type { PaymentChoice } from '../../x402/choose';
import type { Db } from '../../../db/index';
import { chargeUsedCall, releaseCall } from './states';
import {
  chargeProxyPayment,
  heldOf,
  holdProxyPayment,
  holdStatementParts,
  newProxyPayment,
  releaseProxyPayment,
  watchProxyPayment,
} from './records';
import type { AuthenticatedKey } from '../../accounts/accounts';
import type { ReservationRefused } from '../../accounts/credits';
import type { ClaimRef } from '../../basics/idempotency';
import type { CallRequest, TargetResponse } from '../../basics/http/index';

/** What /proxy gives a channel payment (its ProxyCall). */
export interface ChannelProxyCall {
  call: CallRequest;
  key: AuthenticatedKey;
  requestId: string;
  idempotency?: ClaimRef;
}

/** What a paid call through a channel reports of its payment (as /proxy reports any payment). */
export interface ChannelPaymentReport {
  charged: boolean;
  webhookId?: string;
  paymentResponse: string;
  chargedCredits?: bigint;
}

/** How /proxy ends a call paid through a channel: each kind is one of /proxy's outcomes, or the hold's refusal. */
export type ChannelProxyOutcome =
  | { kind: 'pass_through'; response: TargetResponse; payment: ChannelPaymentReport }
  | { kind: 'bad_gateway'; message: string; details: string; upstreamStatus?: number; webhookId?: string }
  | { kind: 'configuration_error'; message: string; details: string }
  | { kind: 'hold_refused'; refused: ReservationRefused; credits: bigint };

export async function proxyThroughChannel(
  deps: PayingDeps,
  input: ChannelProxyCall,
  choice: PaymentChoice,
  budget: CallBudget,
): Promise<ChannelProxyOutcome> {
  const { db, config, clock, log } = deps;
  const payer = deps.chains.evm.account?.address;
  if (payer === undefined)
    return {
      kind: 'configuration_error',
      message: 'The service cannot pay this target',
      details: `no EVM wallet is configured for ${choice.network}`,
    };
  const { totalCredits } = proxyCredits(choice.amountMicroUsdc, config.proxyFeePercent);
  const reference = randomNonce();
  const payment = newProxyPayment(config, clock.now(), input, { reference, choice, credits: totalCredits });
  // No authorization expires here; the window says when the sweep hands a row whose answer was
  // never recorded (its process died) to the watch job, which decides it from its voucher.
  const signed = {
    payer,
    validBefore: BigInt(Math.floor(clock.now().getTime() / 1000) + config.proxyPaymentWindowSeconds),
  };
  // The credits are held and the row written as signed before the voucher may leave this process:
  // in the very statement that records the voucher (one round trip); under an idempotency record,
  // first and on their own (its claim is held in the same transaction).
  let admission: VoucherAdmission | undefined;
  if (input.idempotency) {
    const reservation = await holdProxyPayment(db, payment, signed);
    if (!reservation.ok) return { kind: 'hold_refused', refused: reservation, credits: totalCredits };
  } else {
    admission = { ...holdStatementParts(payment, signed), admitted: (along) => along.hold_reserved === true };
  }
  // A charged answer is charged in the statement that records it: what the seller committed, plus the fee.
  const chargeAlong = (chargedAtomic: bigint): AnswerAlong => {
    const charge = voucherCharge(choice.network, chargedAtomic, totalCredits, config.proxyFeePercent);
    const moved =
      charge === undefined
        ? releaseCall(reference, 'the seller charged nothing for this call')
        : chargeUsedCall(reference, {
            txHash: null,
            outcome: `the seller charged ${chargedAtomic} atomic units through our channel`,
            used: charge,
          });
    // Unflushed: a charge lost with the database is made again by the watch job from the voucher.
    return { columns: sql`${moved} as proxy_moved`, flushed: false };
  };

  const receipt = (success: boolean, extra: { errorReason?: string; amount?: bigint } = {}) =>
    encodePaymentResponseHeader({
      success,
      transaction: '',
      network: choice.network,
      payer,
      ...(extra.errorReason ? { errorReason: extra.errorReason } : {}),
      ...(extra.amount === undefined ? {} : { amount: extra.amount.toString() }),
    });

  let outcome;
  try {
    outcome = await payThroughChannel(deps, {
      call: input.call,
      choice,
      budget,
      callReference: reference,
      chargeAlong,
      ...(admission ? { admission } : {}),
    });
  } catch (error) {
    // Signed or not, the voucher's fate is decided from its record (or its absence) by the watch job.
    log.error({ err: error, reference }, 'the channel payment failed half-way; handed to the watch job');
    const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true });
    return {
      kind: 'bad_gateway',
      message: 'The call failed after the payment was prepared; the channel payment is watched',
      details: error instanceof Error ? error.message : String(error),
      ...(webhookId ? { webhookId } : {}),
    };
  }
  log.info(
    {
      reference,
      network: choice.network,
      channel: 'channelId' in outcome ? outcome.channelId : undefined,
      outcome: outcome.kind,
    },
    'paid target call through a channel',
  );
  switch (outcome.kind) {
    case 'unsigned':
      if (admission !== undefined) {
        // Refused by the hold in the voucher's statement: nothing was written.
        if (outcome.along !== undefined) {
          const held = heldOf(outcome.along, reference);
          if (!held.ok) return { kind: 'hold_refused', refused: held, credits: totalCredits };
        }
      } else await releaseProxyPayment(db, reference, { outcome: outcome.details });
      return outcome.targetSide
        ? {
            kind: 'bad_gateway',
            message: 'The service cannot build a payment for the target',
            details: outcome.details,
            upstreamStatus: 402,
          }
        : {
            kind: 'configuration_error',
            message: 'The service could not prepare the payment',
            details: outcome.details,
          };
    case 'unknown': {
      const { webhookId } = await watchProxyPayment(db, reference, { openRecord: true });
      return {
        kind: 'bad_gateway',
        message: 'The target gave no usable answer after the voucher was sent',
        details: `${outcome.details}; the voucher is decided by the channel's next exchange or the chain, and charged only if the seller committed it`,
        ...(webhookId ? { webhookId } : {}),
      };
    }
    case 'not_charged': {
      await releaseProxyPayment(db, reference, { outcome: outcome.details });
      const response = outcome.response;
      if (response === undefined || response.status >= 500 || response.status === 402)
        return {
          kind: 'bad_gateway',
          message:
            response?.status === 402
              ? 'Upstream refused the channel payment'
              : 'The target answered with a server error; nothing was charged',
          details: outcome.details,
          ...(response ? { upstreamStatus: response.status } : {}),
        };
      return {
        kind: 'pass_through',
        response,
        payment: {
          charged: false,
          chargedCredits: 0n,
          paymentResponse: receipt(false, { errorReason: 'not_charged' }),
        },
      };
    }
    case 'charged': {
      const charge = voucherCharge(choice.network, outcome.chargedAtomic, totalCredits, config.proxyFeePercent);
      // Charged (or released, for a charge under a micro-USDC) with the answer's record.
      const report =
        charge === undefined
          ? { charged: false, chargedCredits: 0n }
          : outcome.along?.proxy_moved === true
            ? { charged: true, chargedCredits: charge.credits }
            : { charged: false };
      return {
        kind: 'pass_through',
        response: outcome.response,
        payment: { ...report, paymentResponse: receipt(true, { amount: outcome.chargedAtomic }) },
      };
    }
  }
}

/**
 * Charges a proxy payment for what the seller committed of its voucher, plus the fee on it (the
 * rest of the hold released); nothing committed (or under a micro-USDC) releases the whole hold.
 */
async function chargeVoucher(
  db: Db,
  reference: string,
  network: NetworkName,
  chargedAtomic: bigint,
  reservedCredits: bigint,
  proxyFeePercent: number,
): Promise<Omit<ChannelPaymentReport, 'paymentResponse'>> {
  const charge = voucherCharge(network, chargedAtomic, reservedCredits, proxyFeePercent);
  if (charge === undefined) {
    await releaseProxyPayment(db, reference, { outcome: 'the seller charged nothing for this call' });
    return { charged: false, chargedCredits: 0n };
  }
  const charged = await chargeProxyPayment(db, reference, {
    outcome: `the seller charged ${chargedAtomic} atomic units through our channel`,
    used: charge,
  });
  return { charged, ...(charged ? { chargedCredits: charge.credits } : {}) };
}

/** What a seller's charge costs the organisation: its micro-USDC and the credits with the fee; none under a micro-USDC. */
function voucherCharge(
  network: NetworkName,
  chargedAtomic: bigint,
  reservedCredits: bigint,
  proxyFeePercent: number,
): { amountMicroUsdc: bigint; credits: bigint } | undefined {
  const usedMicro = chargedMicro(network, chargedAtomic);
  if (usedMicro <= 0n) return undefined;
  const { chargedCredits } = uptoProxyCharge(usedMicro, reservedCredits, proxyFeePercent);
  return { amountMicroUsdc: usedMicro, credits: chargedCredits };
}

/** What a decided voucher means for its proxy payment: charged or released; undefined while it is open. */
export async function settleFromVoucher(
  db: Db,
  payment: { reference: string; network: string; reserved_credits: bigint | null },
  voucher: PayerVoucher,
  proxyFeePercent: number,
): Promise<'charged' | 'released' | undefined> {
  if (voucher.state === 'charged') {
    const report = await chargeVoucher(
      db,
      payment.reference,
      payment.network as NetworkName,
      BigInt(voucher.charged_atomic ?? '0'),
      payment.reserved_credits ?? 0n,
      proxyFeePercent,
    );
    return report.charged ? 'charged' : 'released';
  }
  if (voucher.state === 'not_charged') {
    await releaseProxyPayment(db, payment.reference, { outcome: voucher.details ?? 'the seller committed nothing' });
    return 'released';
  }
  return undefined;
}
