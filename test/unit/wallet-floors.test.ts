// The floors of /relay and /proxy as configured (FLOAT_FLOOR_USDC_<NETWORK>, GAS_FLOOR_<NETWORK>,
// FLOAT_REFRESH_SECONDS): their documented defaults, their validation naming the variable, and
// their atomic units; and the operating files of ops/ naming only metrics the service registers.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../payments/basics/config';
import { floorOf, formatAtomic, parseAtomic } from '../../payments/tracking/float';

const ROOT = path.resolve(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

function refusal(env: Record<string, string>): string | undefined {
  try {
    loadConfig(env);
    return undefined;
  } catch (error) {
    if (error instanceof ConfigError) return error.variable;
    throw error;
  }
}

describe('the wallet floors', () => {
  it('default to 10 USDC and 0.001 ETH / 0.01 SOL on mainnets, and to none on testnets', () => {
    const config = loadConfig({ NETWORKS: 'base,base-sepolia,solana,solana-devnet' });
    expect(config.floatRefreshSeconds).toBe(60);
    expect(config.walletFloors.base).toEqual({
      assetUsdc: '10',
      assetVariable: 'FLOAT_FLOOR_USDC_BASE',
      gas: '0.001',
      gasVariable: 'GAS_FLOOR_BASE',
    });
    expect(floorOf(config, 'base')).toMatchObject({ asset: 10_000_000n, gas: 10n ** 15n });
    expect(floorOf(config, 'solana')).toMatchObject({ asset: 10_000_000n, gas: 10_000_000n });
    expect(floorOf(config, 'base-sepolia')).toMatchObject({ asset: 0n, gas: 0n });
    expect(floorOf(config, 'solana-devnet')).toMatchObject({ asset: 0n, gas: 0n });
    // Only enabled networks have floors.
    expect(floorOf(config, 'skale-base')).toBeUndefined();
  });

  it('are set per network, in whole units, and converted exactly', () => {
    const config = loadConfig({
      NETWORKS: 'base-sepolia,solana-devnet',
      FLOAT_FLOOR_USDC_BASE_SEPOLIA: '2.5',
      GAS_FLOOR_BASE_SEPOLIA: '0.000000000000000001',
      GAS_FLOOR_SOLANA_DEVNET: '1.5',
      FLOAT_REFRESH_SECONDS: '5',
    });
    expect(config.floatRefreshSeconds).toBe(5);
    expect(floorOf(config, 'base-sepolia')).toMatchObject({ asset: 2_500_000n, gas: 1n });
    expect(floorOf(config, 'solana-devnet')).toMatchObject({ asset: 0n, gas: 1_500_000_000n });
  });

  it('refuse a value that is no decimal, or has more decimals than the token, naming the variable', () => {
    expect(refusal({ NETWORKS: 'base', FLOAT_FLOOR_USDC_BASE: 'ten' })).toBe('FLOAT_FLOOR_USDC_BASE');
    expect(refusal({ NETWORKS: 'base', FLOAT_FLOOR_USDC_BASE: '0.0000001' })).toBe('FLOAT_FLOOR_USDC_BASE');
    expect(refusal({ NETWORKS: 'base', FLOAT_FLOOR_USDC_BASE: '-1' })).toBe('FLOAT_FLOOR_USDC_BASE');
    expect(refusal({ NETWORKS: 'base', GAS_FLOOR_BASE: '0.0000000000000000001' })).toBe('GAS_FLOOR_BASE');
    expect(refusal({ NETWORKS: 'solana', GAS_FLOOR_SOLANA: '0.0000000001' })).toBe('GAS_FLOOR_SOLANA');
    expect(refusal({ FLOAT_REFRESH_SECONDS: '0' })).toBe('FLOAT_REFRESH_SECONDS');
  });

  it('read and write atomic amounts exactly', () => {
    expect(parseAtomic('1', 18)).toBe(10n ** 18n);
    expect(parseAtomic('0.000000001', 9)).toBe(1n);
    expect(parseAtomic('12.5', 6)).toBe(12_500_000n);
    expect(formatAtomic(1n, 18)).toBe('0.000000000000000001');
    expect(formatAtomic(12_500_000n, 6)).toBe('12.5');
    expect(formatAtomic(0n, 9)).toBe('0');
  });
});

describe('the operating files of ops/', () => {
  const registered = new Set([...read('server/metrics.ts').matchAll(/'(prs_[a-z_]+)'/g)].map((match) => match[1]));
  /** Metrics named before the service registers them (none now). */
  const announced = new Set<string>();
  const used = (text: string) => [
    ...new Set([...text.matchAll(/\b(prs_[a-z_]+?)(?:_bucket|_count|_sum)?\b/g)].map((match) => match[1]!)),
  ];

  it('the alerting rules name only metrics the service registers', () => {
    const names = used(read('ops/prometheus/alerts.yml'));
    expect(names).toContain('prs_wallet_below_floor');
    expect(names.filter((name) => !registered.has(name) && !announced.has(name))).toEqual([]);
  });

  it('the dashboard names only metrics the service registers', () => {
    const dashboard = read('ops/grafana/dashboard.json');
    JSON.parse(dashboard);
    const names = used(dashboard);
    expect(names.length).toBeGreaterThan(10);
    expect(names.filter((name) => !registered.has(name))).toEqual([]);
  });
});
