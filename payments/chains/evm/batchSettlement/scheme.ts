/**
 * The batch-settlement scheme on EVM networks, its wire side for the registry (x402/schemes.ts):
 * what an offer must hold for us to pay it through a channel (payer.ts channelTerms), and the
 * shape of a channel payload (a deposit, a voucher or a refund, each naming its channel config
 * and carrying a voucher). Deposits are made through the ERC-3009 deposit collector, or the Permit2
 * deposit collector where the offer or the network moves the token by Permit2.
 */
import { fail, ok, type Result } from '../../../basics/result';
import { isPlainObject } from '../../../x402/parse';
import type { PaymentScheme, SchemePayload } from '../../../x402/schemes';
import { channelTerms } from './payer';
import { BATCH_SETTLEMENT_SCHEME } from './voucher';

const CHANNEL_PAYLOAD_TYPES = new Set(['deposit', 'voucher', 'refund']);

function isChannelPayload(
  payload: unknown,
): payload is { type: string; channelConfig: Record<string, unknown>; voucher: Record<string, unknown> } {
  return (
    isPlainObject(payload) &&
    typeof payload.type === 'string' &&
    CHANNEL_PAYLOAD_TYPES.has(payload.type) &&
    isPlainObject(payload.channelConfig) &&
    isPlainObject(payload.voucher)
  );
}

export const BATCH_SETTLEMENT_EVM: PaymentScheme = {
  scheme: BATCH_SETTLEMENT_SCHEME,
  transferMethods: ['eip3009', 'permit2'],
  checkPayload: (payload): Result<SchemePayload, 'invalid_payload'> =>
    isChannelPayload(payload)
      ? ok(payload as unknown as SchemePayload)
      : fail('invalid_payload', 'a batch-settlement payload is a deposit, voucher or refund with its channel config'),
  sameAsset: (asset, configured) => asset.toLowerCase() === configured.toLowerCase(),
  recognizes: (payload) => isChannelPayload(payload),
  replayIdentity: (payload) => {
    const channel = payload as unknown as {
      channelConfig: { payer?: unknown };
      voucher: { channelId?: unknown; maxClaimableAmount?: unknown };
    };
    const payer =
      typeof channel.channelConfig.payer === 'string' ? channel.channelConfig.payer.toLowerCase() : undefined;
    return { payer, payment: `${String(channel.voucher.channelId)}:${String(channel.voucher.maxClaimableAmount)}` };
  },
  recipientProblem: (requirements) => {
    const terms = channelTerms(requirements);
    if (terms.ok) return undefined;
    return terms.reason === 'invalid_pay_to'
      ? { reason: 'invalid_pay_to', details: terms.details }
      : { reason: 'invalid_channel_terms', details: terms.details };
  },
};
