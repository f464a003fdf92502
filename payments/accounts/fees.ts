/**
 * Fee arithmetic in bigint micro-USDC and credits. /relay, /relay/sim and /config all read the
 * same figures from here, so what a simulation reports is what a payment charges.
 */
import { MICRO_PER_CREDIT, formatUnits, mulDivCeil, parseUsdc, percentToBasisPoints } from '../basics/money';

const BASIS_POINTS = 10_000n;

export interface RelayFeeSettings {
  percent: number;
  minUsdc: string;
}

export interface RelayFee {
  targetMicro: bigint;
  feeMicro: bigint;
  totalMicro: bigint;
}

/** total = max(ceil(target x (1 + p)), target + min fee). */
export function relayFee(targetMicro: bigint, settings: RelayFeeSettings): RelayFee {
  const percentFee = mulDivCeil(targetMicro, percentToBasisPoints(settings.percent), BASIS_POINTS);
  const minFee = parseUsdc(settings.minUsdc);
  const feeMicro = percentFee > minFee ? percentFee : minFee;
  return { targetMicro, feeMicro, totalMicro: targetMicro + feeMicro };
}

export function relayFeeModelText(settings: RelayFeeSettings): string {
  const minFee = parseUsdc(settings.minUsdc);
  return minFee === 0n
    ? `flat ${settings.percent}% on top of the target amount`
    : `${settings.percent}% on top of the target amount, at least ${formatUnits(minFee, 6)} USDC`;
}

/** Credits charged for paying `targetMicro` through /proxy: ceil(amount x (1 + p) / 1000). */
export function proxyCredits(
  targetMicro: bigint,
  proxyFeePercent: number,
): { totalCredits: bigint; totalMicro: bigint; feeMicro: bigint } {
  const bps = percentToBasisPoints(proxyFeePercent);
  const totalMicroExact = mulDivCeil(targetMicro, BASIS_POINTS + bps, BASIS_POINTS);
  const totalCredits = mulDivCeil(targetMicro * (BASIS_POINTS + bps), 1n, BASIS_POINTS * MICRO_PER_CREDIT);
  return { totalCredits, totalMicro: totalMicroExact, feeMicro: totalMicroExact - targetMicro };
}

/**
 * What an upto call through /proxy is charged once the chain shows what the target settled:
 * `usedMicro` (the settled amount in micro-USDC, a fraction of a micro-unit already dropped in the
 * client's favour) plus the fee on it, in credits as proxyCredits counts them, so that a target
 * that settles its maximum costs what an exact target of that price does; never more than the
 * `reservedCredits` held for the maximum (the rest of which is released).
 */
export function uptoProxyCharge(
  usedMicro: bigint,
  reservedCredits: bigint,
  proxyFeePercent: number,
): { chargedCredits: bigint; releasedCredits: bigint; feeMicro: bigint } {
  if (usedMicro < 0n) throw new RangeError('a used amount is not negative');
  const { totalCredits, feeMicro } = proxyCredits(usedMicro, proxyFeePercent);
  const chargedCredits = totalCredits < reservedCredits ? totalCredits : reservedCredits;
  return { chargedCredits, releasedCredits: reservedCredits - chargedCredits, feeMicro };
}

/**
 * What a client that paid `takenMicro` (the maximum plus the fee on it, through an exact payment)
 * for an upto target pays in the end once the chain shows the target settled `usedMicro`: the used
 * amount plus the fee on it, as relayFee counts it (what an exact target of that price costs), and
 * the rest refunded. Never more than was taken is charged or refunded.
 */
export function uptoRelaySettlement(
  usedMicro: bigint,
  takenMicro: bigint,
  settings: RelayFeeSettings,
): { chargedMicro: bigint; refundMicro: bigint; feeMicro: bigint } {
  if (usedMicro < 0n || takenMicro < 0n) throw new RangeError('amounts are not negative');
  const { totalMicro, feeMicro } = relayFee(usedMicro, settings);
  const chargedMicro = totalMicro < takenMicro ? totalMicro : takenMicro;
  return { chargedMicro, refundMicro: takenMicro - chargedMicro, feeMicro };
}

/** How a target prices a call, and what the caller pays for it, as the dry runs show it. */
export interface Pricing {
  scheme: 'exact' | 'upto' | 'batch-settlement';
  /** upto: the most the target may settle, micro-USDC. */
  maxTargetMicro?: bigint;
  /** upto: the most the caller pays (the maximum plus the fee), micro-USDC. */
  maxTotalMicro?: bigint;
  /** upto on /proxy: the credits held for the maximum plus the fee. */
  maxTotalCredits?: bigint;
  rule: string;
}

/** The pricing of a /proxy call whose target asks `targetMicro` (for upto: its maximum). */
export function proxyPricing(
  scheme: 'exact' | 'upto' | 'batch-settlement',
  targetMicro: bigint,
  proxyFeePercent: number,
): Pricing {
  const { totalCredits, totalMicro } = proxyCredits(targetMicro, proxyFeePercent);
  if (scheme === 'batch-settlement')
    return {
      scheme,
      maxTargetMicro: targetMicro,
      maxTotalMicro: totalMicro,
      maxTotalCredits: totalCredits,
      rule: `batch-settlement: the service pays through its own channel with the target, a voucher of at most ${formatUnits(targetMicro, 6)} USDC per call (no transaction per call); ${totalCredits} credits (the price plus the ${proxyFeePercent}% fee) are held, the account is charged what the target reports it charged plus the fee on it, and the rest is released`,
    };
  if (scheme === 'exact')
    return {
      scheme,
      rule: `exact: the target takes its price of ${formatUnits(targetMicro, 6)} USDC; the account is charged ${totalCredits} credits (the price plus the ${proxyFeePercent}% fee)`,
    };
  return {
    scheme,
    maxTargetMicro: targetMicro,
    maxTotalMicro: totalMicro,
    maxTotalCredits: totalCredits,
    rule: `upto: the target settles what the call uses, at most ${formatUnits(targetMicro, 6)} USDC; ${totalCredits} credits (the maximum plus the ${proxyFeePercent}% fee) are held, the account is charged what the target settles plus the fee on it, and the rest is released`,
  };
}

/** The pricing of a /relay call whose target asks `fee.targetMicro` (for upto: its maximum). */
export function relayPricing(scheme: 'exact' | 'upto' | 'batch-settlement', fee: RelayFee): Pricing {
  if (scheme === 'batch-settlement')
    return {
      scheme,
      maxTargetMicro: fee.targetMicro,
      maxTotalMicro: fee.totalMicro,
      rule: `batch-settlement: the service pays the target through its own channel, a voucher of at most ${formatUnits(fee.targetMicro, 6)} USDC per call; you pay ${formatUnits(fee.totalMicro, 6)} USDC (the price plus the fee) and are charged what the target reports it charged plus the fee on it, the rest refunded to you on the network you paid on`,
    };
  if (scheme === 'exact')
    return {
      scheme,
      rule: `exact: the target takes its price of ${formatUnits(fee.targetMicro, 6)} USDC; you pay ${formatUnits(fee.totalMicro, 6)} USDC (the price plus the fee)`,
    };
  return {
    scheme,
    maxTargetMicro: fee.targetMicro,
    maxTotalMicro: fee.totalMicro,
    rule: `upto: the target settles what the call uses, at most ${formatUnits(fee.targetMicro, 6)} USDC; you pay at most ${formatUnits(fee.totalMicro, 6)} USDC (the maximum plus the fee) and are charged what the target settles plus the fee on it: paying by upto, only that is taken; paying by exact, the rest is refunded to you on the network you paid on`,
  };
}
