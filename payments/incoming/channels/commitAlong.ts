/**
 * A channel charge committed in one database transaction with what it pays for (credits bought):
 * the charge row, the channel's new cumulative amount and the caller's own writes are one commit,
 * so a crash between them leaves both or neither. The same rules as commitChannelCharge
 * (./receive.ts): only the lease's holder commits, at most the voucher's ceiling, and the charge
 * row's unique (channel, cumulative) refuses any second commit of that amount.
 */
import type { Deps } from '../../deps';
import type { Tx } from '../../../db/index';
import { CHANNEL_ERRORS, type ChannelReservation, type ChannelRefusal } from './receive';
import { insertCharge, updateChannel, type StoredChannel } from './store';

export type ChargeCommitAlong<T> =
  { ok: true; channel: StoredChannel; charged: bigint; value: T } | { ok: false; refusal: ChannelRefusal };

export async function commitChannelChargeAlong<T>(
  deps: Pick<Deps, 'db'>,
  reservation: ChannelReservation,
  {
    reference,
    along,
  }: {
    /** What the charge paid for, kept on its row (receiver_channel_charges.target_url). */
    reference: string;
    /** The caller's writes, in the charge's transaction; the cumulative amount identifies the charge. */
    along: (tx: Tx, charge: { cumulative: bigint; amount: bigint }) => Promise<T>;
  },
): Promise<ChargeCommitAlong<T>> {
  return updateChannel<ChargeCommitAlong<T>>(deps.db, reservation.channelId, async (current, tx) => {
    if (!current || current.pendingId !== reservation.pendingId)
      return {
        result: {
          ok: false,
          refusal: { code: CHANNEL_ERRORS.channelBusy, details: 'the request lost its lease on the channel' },
        },
      };
    const amount = reservation.increment;
    const cumulative = current.chargedCumulative + amount;
    const ceiling = reservation.voucher.maxClaimableAmount;
    if (cumulative > ceiling)
      return {
        result: {
          ok: false,
          refusal: {
            code: CHANNEL_ERRORS.chargeExceedsSigned,
            details: `charged ${cumulative} exceeds the voucher's ${ceiling}`,
          },
        },
        write: { pending: null },
      };
    await insertCharge(tx, {
      channelId: reservation.channelId,
      cumulative,
      amount,
      signedMaxClaimable: ceiling,
      targetUrl: reference,
    });
    const value = await along(tx, { cumulative, amount });
    const channel: StoredChannel = {
      ...current,
      chargedCumulative: cumulative,
      signedMaxClaimable: ceiling,
      signature: reservation.voucher.signature,
      pendingId: undefined,
      pendingUntil: undefined,
    };
    return {
      result: { ok: true, channel, charged: amount, value },
      write: {
        chargedCumulative: cumulative,
        signedMaxClaimable: ceiling,
        signature: reservation.voucher.signature,
        pending: null,
        lastRequestAt: new Date(),
      },
    };
  });
}
