import { describe, expect, it } from 'vitest';
import {
  assetToMicro,
  formatUnits,
  microToAsset,
  microToUsdc,
  mulDivCeil,
  parseUsdc,
  percentageText,
  percentToBasisPoints,
} from '../../payments/basics/money';
import {
  proxyCredits,
  relayFee,
  relayFeeModelText,
  uptoProxyCharge,
  uptoRelaySettlement,
} from '../../payments/accounts/fees';

describe('money arithmetic', () => {
  it('parses USDC decimals exactly and refuses more than 6 decimals', () => {
    expect(parseUsdc('0.1')).toBe(100_000n);
    expect(parseUsdc('100')).toBe(100_000_000n);
    expect(parseUsdc('0.000001')).toBe(1n);
    expect(() => parseUsdc('0.0000001')).toThrow(RangeError);
    expect(() => parseUsdc('-1')).toThrow(RangeError);
    expect(() => parseUsdc('1e3')).toThrow(RangeError);
  });

  it('formats atomic units without float error', () => {
    expect(formatUnits(103_000n, 6)).toBe('0.103');
    expect(formatUnits(1n, 6)).toBe('0.000001');
    expect(formatUnits(0n, 6)).toBe('0');
    expect(formatUnits(123_456_789_012_345_678n, 6)).toBe('123456789012.345678');
    expect(microToUsdc(300_000n)).toBe(0.3);
  });

  it('rounds percentages half up to one decimal', () => {
    expect(percentageText(0n, 100n)).toBe('0.0%');
    expect(percentageText(1n, 8n)).toBe('12.5%');
    expect(percentageText(1n, 3n)).toBe('33.3%');
    expect(percentageText(2n, 3n)).toBe('66.7%');
    expect(percentageText(5n, 5n)).toBe('100.0%');
    expect(percentageText(0n, 0n)).toBe('0.0%');
  });

  it('computes ceilings of products exactly', () => {
    expect(mulDivCeil(10n, 103n, 100n)).toBe(11n);
    expect(mulDivCeil(100n, 103n, 100n)).toBe(103n);
    expect(mulDivCeil(0n, 103n, 100n)).toBe(0n);
    expect(percentToBasisPoints(3)).toBe(300n);
    expect(percentToBasisPoints(2.5)).toBe(250n);
    expect(() => percentToBasisPoints(2.555)).toThrow(RangeError);
  });
});

describe('fees', () => {
  it('charges 3% on top of the target amount: 0.10 costs 0.103', () => {
    expect(relayFee(100_000n, { percent: 3, minUsdc: '0' })).toEqual({
      targetMicro: 100_000n,
      feeMicro: 3_000n,
      totalMicro: 103_000n,
    });
  });

  it('rounds the relay fee up to the next micro-USDC', () => {
    expect(relayFee(1n, { percent: 3, minUsdc: '0' }).totalMicro).toBe(2n);
    expect(relayFee(33n, { percent: 3, minUsdc: '0' }).totalMicro).toBe(34n);
  });

  it('applies the minimum fee when it is larger', () => {
    expect(relayFee(10_000n, { percent: 3, minUsdc: '0.002' })).toEqual({
      targetMicro: 10_000n,
      feeMicro: 2_000n,
      totalMicro: 12_000n,
    });
    expect(relayFee(1_000_000n, { percent: 3, minUsdc: '0.002' }).feeMicro).toBe(30_000n);
    expect(relayFeeModelText({ percent: 3, minUsdc: '0.002' })).toContain('0.002');
    expect(relayFeeModelText({ percent: 3, minUsdc: '0' })).toMatch(/^flat 3%/);
  });

  it('charges proxy credits as ceil(amount x 1.03 / 1000)', () => {
    expect(proxyCredits(10_000n, 3).totalCredits).toBe(11n); // 10300 micro -> 10.3 credits -> 11
    expect(proxyCredits(1_000_000n, 3).totalCredits).toBe(1_030n);
    expect(proxyCredits(1n, 3).totalCredits).toBe(1n);
    expect(proxyCredits(0n, 3).totalCredits).toBe(0n);
  });

  it('charges an upto call through /proxy what was used plus the fee, never more than the credits held', () => {
    // 20,000 micro-USDC held as 21 credits; 7,500 used: ceil(7,725 / 1000) = 8 charged, 13 released.
    expect(uptoProxyCharge(7_500n, 21n, 3)).toEqual({ chargedCredits: 8n, releasedCredits: 13n, feeMicro: 225n });
    expect(uptoProxyCharge(20_000n, 21n, 3)).toMatchObject({ chargedCredits: 21n, releasedCredits: 0n });
    // A hold smaller than the used amount's credits (never made by /proxy) still caps the charge.
    expect(uptoProxyCharge(20_000n, 5n, 3)).toMatchObject({ chargedCredits: 5n, releasedCredits: 0n });
  });

  it('charges an upto call through /relay what was used plus the fee, refunding the rest of what was taken and never more', () => {
    const settings = { percent: 3, minUsdc: '0' };
    expect(uptoRelaySettlement(7_500n, 20_600n, settings)).toEqual({
      chargedMicro: 7_725n,
      refundMicro: 12_875n,
      feeMicro: 225n,
    });
    expect(uptoRelaySettlement(20_000n, 20_600n, settings)).toMatchObject({ chargedMicro: 20_600n, refundMicro: 0n });
    expect(uptoRelaySettlement(0n, 20_600n, settings)).toMatchObject({ chargedMicro: 0n, refundMicro: 20_600n });
    // With a minimum fee the charge is what an exact target of the used price costs; never above what was taken.
    expect(uptoRelaySettlement(1_000n, 22_000n, { percent: 3, minUsdc: '0.002' })).toMatchObject({
      chargedMicro: 3_000n,
      refundMicro: 19_000n,
    });
    expect(uptoRelaySettlement(30_000n, 20_600n, settings)).toMatchObject({ chargedMicro: 20_600n, refundMicro: 0n });
  });
});

describe("an asset's atomic units and micro-USDC", () => {
  it('are the same for a 6-decimal stablecoin', () => {
    expect(assetToMicro(10_300n, 6)).toBe(10_300n);
    expect(microToAsset(10_300n, 6)).toBe(10_300n);
  });

  it('convert by the decimals of an 18-decimal stablecoin, dropping what is under a micro-USDC', () => {
    expect(microToAsset(10_300n, 18)).toBe(10_300_000_000_000_000n);
    expect(assetToMicro(10_300_000_000_000_000n, 18)).toBe(10_300n);
    // A price of 10,300.9 micro-USDC is charged 10,300: never more than it is worth.
    expect(assetToMicro(10_300_900_000_000_000n, 18)).toBe(10_300n);
    // Round trip of what we ask a client: exact.
    expect(assetToMicro(microToAsset(123_456_789n, 18), 18)).toBe(123_456_789n);
  });

  it("convert by the decimals of a 2-decimal asset, in the client's favour", () => {
    expect(assetToMicro(1_03n, 2)).toBe(1_030_000n);
    // We ask 1.034999 USD: 1.03 in cents, not 1.04.
    expect(microToAsset(1_034_999n, 2)).toBe(1_03n);
  });
});
