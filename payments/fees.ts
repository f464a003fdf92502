/**
 * Fee arithmetic in bigint micro-USDC and credits. /relay, /relay/sim and /config all read the
 * same figures from here, so what a simulation reports is what a payment charges.
 */
import { MICRO_PER_CREDIT, formatUnits, mulDivCeil, parseUsdc, percentToBasisPoints } from './money';

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
