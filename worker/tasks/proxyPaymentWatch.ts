/**
 * Resolves one signed /proxy payment from the chain: on chain -> credits charged (for upto: what
 * the chain shows the target settled, plus the fee on it, the rest released; held while that amount
 * is unknown), record success with the transaction hash; expired unused -> credits released, record payment_failed; not yet
 * decided -> the job queues itself again (same job key) for a later look. Safe to repeat: it reads
 * the row first, and every move it makes is a guarded update that does nothing the second time.
 */
import type { Task } from 'graphile-worker';
import {
  chargeOf,
  chargeProxyPayment,
  enqueueWatch,
  findProxyPayment,
  releaseProxyPayment,
  signedTargetPaymentOf,
} from '../../payments/operations/proxy/records';
import { heldLookAt, nextLookAt, readPaymentOnChain, UNREADABLE_RECHECK_MS } from '../../payments/outgoing/index';
import type { WorkerDeps } from '../deps';
import { voucherFromChain, voucherOfProxyPayment } from '../../payments/outgoing/channels';
import { settleFromVoucher } from '../../payments/operations/proxy/channel';

// The schedule of looks is shared with the relay's watch of its target payments.
export {
  EXPIRED_RECHECK_MS,
  MAX_RECHECK_MS,
  MIN_RECHECK_MS,
  nextLookAt,
  UNREADABLE_RECHECK_MS,
  UNTIMED_RECHECK_MS,
} from '../../payments/outgoing/index';
/** A row still `reserved` this long after it was written was never signed: its request is gone. */
export const NEVER_SIGNED_AFTER_MS = 10 * 60_000;

function parseWatchPayload(payload: unknown): bigint {
  const id = (payload as { proxyPaymentId?: unknown } | null)?.proxyPaymentId;
  if (typeof id !== 'string' || !/^[1-9][0-9]{0,18}$/.test(id)) {
    throw new Error(`proxy_payment_watch: payload needs proxyPaymentId as a decimal string`);
  }
  return BigInt(id);
}

/**
 * A /proxy payment made through a channel is decided by its voucher (payments/outgoing/channels.ts):
 * charged what the seller committed, or released; a voucher still unknown is read against the
 * chain (a claim at or above its ceiling commits it) and looked at again, less often as it ages,
 * until the channel's next exchange or the chain decides it. A row with no voucher after
 * NEVER_SIGNED_AFTER_MS never paid anything.
 */
async function watchChannelVoucher(
  deps: WorkerDeps,
  payment: NonNullable<Awaited<ReturnType<typeof findProxyPayment>>>,
  now: Date,
  log: WorkerDeps['log'],
): Promise<void> {
  const voucher = await voucherOfProxyPayment(deps.db, payment.reference);
  if (voucher === undefined) {
    if (now.getTime() - payment.created_at.getTime() >= NEVER_SIGNED_AFTER_MS) {
      await releaseProxyPayment(deps.db, payment.reference, { outcome: 'no voucher was signed for this call' });
      log.info('channel payment never signed; credits released');
    } else await enqueueWatch(deps.db, payment.id, heldLookAt(now, payment.created_at));
    return;
  }
  let decided = voucher;
  try {
    decided = await voucherFromChain(deps, voucher);
  } catch (error) {
    log.warn({ err: error }, 'could not read the channel from the chain; will look again');
  }
  const settled = await settleFromVoucher(deps.db, payment, decided, deps.config.proxyFeePercent);
  if (settled === undefined) {
    await enqueueWatch(deps.db, payment.id, heldLookAt(now, payment.signed_at ?? payment.created_at));
    return;
  }
  log.info({ voucherId: String(voucher.id), state: decided.state }, `channel payment ${settled}`);
}

export function proxyPaymentWatch(deps: WorkerDeps): Task<'proxy_payment_watch'> {
  return async (payload) => {
    const id = parseWatchPayload(payload);
    const log = deps.log.child({ task: 'proxy_payment_watch', proxyPaymentId: String(id) });
    const payment = await findProxyPayment(deps.db, id);
    if (!payment || payment.state === 'charged' || payment.state === 'released') return;
    const now = deps.clock.now();
    if (payment.state === 'reserved') {
      // Nothing was signed, so nothing can have been paid; a request still running keeps its row.
      if (now.getTime() - payment.created_at.getTime() >= NEVER_SIGNED_AFTER_MS) {
        await releaseProxyPayment(deps.db, payment.reference, {
          outcome: 'never signed: the request stopped before the payment was made',
        });
      }
      return;
    }
    if (payment.scheme === 'batch-settlement') {
      await watchChannelVoucher(deps, payment, now, log);
      return;
    }
    const reading = await readPaymentOnChain(deps.chains, signedTargetPaymentOf(payment), { now });
    switch (reading.state) {
      case 'settled': {
        // upto: charged what the target settled once the chain shows how much; held until then.
        const charge = chargeOf(payment, reading, deps.config.proxyFeePercent);
        if (charge.kind === 'amount_unknown') {
          log.warn({ details: charge.details }, 'upto payment settled; its amount is not known yet; will look again');
          await enqueueWatch(deps.db, id, heldLookAt(now, payment.signed_at ?? payment.created_at));
          return;
        }
        if (charge.kind === 'nothing_to_charge') {
          if (await releaseProxyPayment(deps.db, payment.reference, { outcome: charge.details }))
            log.info({ details: charge.details }, 'upto payment settled under a micro-USDC; credits released');
          return;
        }
        if (
          await chargeProxyPayment(deps.db, payment.reference, {
            ...(reading.txHash ? { txHash: reading.txHash } : {}),
            outcome: reading.details,
            ...(charge.used ? { used: charge.used } : {}),
          })
        ) {
          log.info(
            { txHash: reading.txHash, ...(charge.used ? { chargedCredits: String(charge.used.credits) } : {}) },
            'proxy payment confirmed on chain; credits charged',
          );
        }
        return;
      }
      case 'expired':
        if (await releaseProxyPayment(deps.db, payment.reference, { outcome: reading.details })) {
          log.info({ details: reading.details }, 'proxy payment never settled; credits released');
        }
        return;
      case 'open':
        await enqueueWatch(deps.db, id, nextLookAt(now, reading.expiresAt));
        return;
      case 'unknown':
        log.warn({ details: reading.details }, 'could not read the chain for a proxy payment; will look again');
        await enqueueWatch(deps.db, id, new Date(now.getTime() + UNREADABLE_RECHECK_MS));
        return;
    }
  };
}
