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
