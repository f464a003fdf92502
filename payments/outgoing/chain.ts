/**
 * What the chain says about a payment we signed for a target (/proxy, and the second leg of
 * /relay), read by the family of its network (payments/chains/registry.ts). Only the chain decides whether the target was paid: a target's word (its status code,
 * its X-PAYMENT-RESPONSE) is a hint of where to look, never a proof.
 */
import type { Chains } from '../chains/index';
import { familyOf } from '../chains/registry';
import type { ChainReading, SignedTargetPayment } from '../chains/types';
import { assetToMicro } from '../basics/money';
import { canonicalNetwork, NETWORK_TABLE } from '../basics/networkTable';

export { EVM_EXPIRY_MARGIN_SECONDS } from '../chains/evm/readPayment';
export type { ChainReading, SignedTargetPayment } from '../chains/types';

/** Between two looks at an open payment: a quarter of the time left before it expires, within these bounds. */
export const MIN_RECHECK_MS = 1_000;
export const MAX_RECHECK_MS = 15_000;
/** Once it has expired by the clock (waiting for the chain's clock), or when no expiry time is known. */
export const EXPIRED_RECHECK_MS = 2_000;
export const UNTIMED_RECHECK_MS = 5_000;
/** After a failed read of the chain. */
export const UNREADABLE_RECHECK_MS = 10_000;

/** When to read the chain again for a payment still open: sooner as its expiry nears. */
export function nextLookAt(now: Date, expiresAt: Date | undefined): Date {
  if (expiresAt === undefined) return new Date(now.getTime() + UNTIMED_RECHECK_MS);
  const left = expiresAt.getTime() - now.getTime();
  const delay =
    left <= 0 ? EXPIRED_RECHECK_MS : Math.min(Math.max(Math.floor(left / 4), MIN_RECHECK_MS), MAX_RECHECK_MS);
  return new Date(now.getTime() + delay);
}

/** An upto payment settled but of an amount not known yet is looked at less often as it ages: a quarter of its age, within these bounds. */
export const HELD_MIN_RECHECK_MS = 10_000;
export const HELD_MAX_RECHECK_MS = 60 * 60_000;

/** When to read the chain again for an upto payment the chain shows settled, but not yet how much. */
export function heldLookAt(now: Date, since: Date): Date {
  const age = Math.max(0, now.getTime() - since.getTime());
  return new Date(now.getTime() + Math.min(HELD_MAX_RECHECK_MS, Math.max(HELD_MIN_RECHECK_MS, Math.floor(age / 4))));
}

/** A payment whose payer is recorded: the only kind the chain can be asked about. */
type PaymentWithPayer = SignedTargetPayment & { payer: string };

function hasPayer(payment: SignedTargetPayment): payment is PaymentWithPayer {
  return payment.payer !== null;
}

export async function readPaymentOnChain(
  chains: Chains,
  payment: SignedTargetPayment,
  { now, reportedTxHash }: { now: Date; reportedTxHash?: string },
): Promise<ChainReading> {
  const network = canonicalNetwork(payment.network);
  if (network === undefined || !hasPayer(payment))
    return { state: 'unknown', details: `${payment.label} has no network or payer` };
  return familyOf(network).readOurPayment(chains, network, payment, {
    now,
    ...(reportedTxHash === undefined ? {} : { reportedTxHash }),
  });
}

/**
 * What a settled reading shows the target took, in micro-USDC (a fraction of a micro-unit of an
 * 18-decimal token dropped, in the client's favour), with its transaction: undefined while the
 * chain has not said how much moved (then nothing is decided on it).
 */
export function settledMicroUsdc(
  network: string,
  reading: Extract<ChainReading, { state: 'settled' }>,
): { usedMicro: bigint; amount: bigint; txHash: string } | undefined {
  const known = canonicalNetwork(network);
  if (known === undefined || reading.amount === undefined || reading.txHash === undefined) return undefined;
  return {
    usedMicro: assetToMicro(reading.amount, NETWORK_TABLE[known].decimals),
    amount: reading.amount,
    txHash: reading.txHash,
  };
}
