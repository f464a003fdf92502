/**
 * Amounts are bigint atomic units inside the program: micro-USDC (6 decimals) and credits
 * (1 credit = 0.001 USDC = 1000 micro-USDC). Numbers in USDC appear only at the edge, where the
 * interface shows numbers; they are produced from exact decimal strings, never by float arithmetic.
 */
export const MICRO_PER_USDC = 1_000_000n;
export const MICRO_PER_CREDIT = 1_000n;
export const CREDITS_PER_USDC = 1_000n;

/** Parses a non-negative decimal USDC amount ("0.01", "100") into micro-USDC; more than 6 decimals is refused. */
export function parseUsdc(value: string): bigint {
  const match = /^([0-9]+)(?:\.([0-9]{1,6}))?$/.exec(value.trim());
  const [, wholeDigits, fractionDigits] = match ?? [];
  if (wholeDigits === undefined) throw new RangeError(`not a USDC amount with at most 6 decimals: "${value}"`);
  const whole = BigInt(wholeDigits);
  const fraction = BigInt((fractionDigits ?? '').padEnd(6, '0'));
  return whole * MICRO_PER_USDC + fraction;
}

export function usdToMicro(wholeUsd: number): bigint {
  if (!Number.isSafeInteger(wholeUsd) || wholeUsd < 0) throw new RangeError(`not a whole USD amount: ${wholeUsd}`);
  return BigInt(wholeUsd) * MICRO_PER_USDC;
}

/** Exact decimal text of an atomic amount: formatUnits(1500n, 3) === "1.5". */
export function formatUnits(amount: bigint, decimals: number): string {
  const negative = amount < 0n;
  const digits = (negative ? -amount : amount).toString().padStart(decimals + 1, '0');
  const whole = digits.slice(0, digits.length - decimals);
  const fraction = digits.slice(digits.length - decimals).replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}`;
}

/** micro-USDC as text for people ("0.0103 USDC"), in messages and records. */
export function usdcText(micro: bigint): string {
  return `${formatUnits(micro, 6)} USDC`;
}

/** micro-USDC as a JSON number of USDC (edge only). */
export function microToUsdc(micro: bigint): number {
  return Number(formatUnits(micro, 6));
}

/** credits as a JSON number of USDC (edge only). */
export function creditsToUsdc(credits: bigint): number {
  return Number(formatUnits(credits, 3));
}

/** Share of a limit used, as text with one decimal and a percent sign ("12.5%"), rounded half up. */
export function percentageText(used: bigint, limit: bigint): string {
  if (limit <= 0n) return used > 0n ? '100.0%' : '0.0%';
  const tenths = (used * 1000n + limit / 2n) / limit;
  return `${tenths / 10n}.${tenths % 10n}%`;
}

/** ceil(a * numerator / denominator) for non-negative bigints. */
export function mulDivCeil(amount: bigint, numerator: bigint, denominator: bigint): bigint {
  if (amount < 0n || numerator < 0n || denominator <= 0n) throw new RangeError('mulDivCeil takes non-negative values');
  return (amount * numerator + denominator - 1n) / denominator;
}

/** A percentage such as 3 or 2.5 as a fraction of 10_000 (basis points), exactly. */
export function percentToBasisPoints(percent: number): bigint {
  const basisPoints = Math.round(percent * 100);
  if (Math.abs(basisPoints / 100 - percent) > 1e-9)
    throw new RangeError(`percentage with more than 2 decimals: ${percent}`);
  return BigInt(basisPoints);
}

/** The decimals of micro-USDC, the unit of every amount inside the service (fees, credits, limits). */
export const MICRO_DECIMALS = 6;

/**
 * An amount in an asset's atomic units, as micro-USDC (USD stablecoins count 1:1). Exact for an
 * asset with 6 decimals or fewer; for more, a fraction of a micro-unit is dropped: the client is
 * charged, and credited, never more than the asset amount is worth.
 */
export function assetToMicro(amount: bigint, decimals: number): bigint {
  if (decimals >= MICRO_DECIMALS) return amount / 10n ** BigInt(decimals - MICRO_DECIMALS);
  return amount * 10n ** BigInt(MICRO_DECIMALS - decimals);
}

/**
 * micro-USDC in an asset's atomic units: what we ask a client to pay us in that asset. Exact for an
 * asset with 6 decimals or more; for fewer, a fraction of an atomic unit is dropped, in the client's favour.
 */
export function microToAsset(micro: bigint, decimals: number): bigint {
  if (decimals >= MICRO_DECIMALS) return micro * 10n ** BigInt(decimals - MICRO_DECIMALS);
  return micro / 10n ** BigInt(MICRO_DECIMALS - decimals);
}
