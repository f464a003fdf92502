/** The answers of a call refused by its ceiling or its key's policy (payments/accounts/policy.ts): 422 or 403, nothing moved. */
import type { AuthenticatedKey } from '../payments/accounts/accounts';
import { maxAmountOf, type CallLimits, type LimitRefusal, type PriceAboveLimit } from '../payments/accounts/policy';
import type { WalletBelowFloor } from '../payments/tracking/floorCheck';
import { errorReply } from './errors';

export function limitRefusalReply(refusal: LimitRefusal) {
  if (refusal.kind === 'policy_refused') return errorReply('policy_refused', refusal.details);
  return priceAboveLimitReply(refusal);
}

/** 422 price_above_limit, naming the price and the ceiling. */
export function priceAboveLimitReply(refusal: PriceAboveLimit) {
  return errorReply('price_above_limit', refusal.details, {
    price: refusal.priceMicroUsdc.toString(),
    max_amount: refusal.maxAmountMicroUsdc.toString(),
    network: refusal.network,
  });
}

/** The limits of a call: its body's `max_amount`, and on the x-api-key operations its key's policy. */
export function callLimits(body: { max_amount?: string }, key?: AuthenticatedKey): CallLimits {
  const maxAmountMicroUsdc = maxAmountOf(body);
  return {
    ...(maxAmountMicroUsdc === undefined ? {} : { maxAmountMicroUsdc }),
    ...(key ? { policy: key.policy, keyPrefix: key.prefix } : {}),
  };
}

/**
 * 503 float_below_floor or gas_below_floor (payments/tracking/floorCheck.ts): our wallet is under a
 * floor on the call's network; nothing moved. Retry-After: the float job's period, when the
 * reading can next change.
 */
export function belowFloorReply(refusal: WalletBelowFloor, retryAfterSeconds: number) {
  return {
    ...errorReply(refusal.code, refusal.details, { network: refusal.network }),
    headers: { 'Retry-After': String(retryAfterSeconds) },
  };
}
