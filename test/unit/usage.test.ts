// The pure parts of what an organisation reads: the range of a usage report, the target as the
// history shows it, explorer links, and the cursor's checks.
import { describe, expect, it } from 'vitest';
import type { NetworkSettings } from '../../payments/basics/config';
import { explorerUrl, targetOriginAndPath, usageRange } from '../../payments/accounts/usage';

const NOW = new Date('2026-11-28T12:00:00Z');

describe('usageRange', () => {
  it('defaults to the 30 days ending today, and to today (at most 90 days on) when only from is given', () => {
    expect(usageRange(undefined, undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '2026-10-30', toDay: '2026-11-28' },
    });
    expect(usageRange('2026-11-01', undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '2026-11-01', toDay: '2026-11-28' },
    });
    expect(usageRange('2026-01-01', undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '2026-01-01', toDay: '2026-03-31' },
    });
    expect(usageRange('2027-05-01', undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '2027-05-01', toDay: '2027-05-01' },
    });
  });

  it('refuses more than 90 days and a reversed range', () => {
    expect(usageRange('2026-01-01', '2026-03-31', NOW).ok).toBe(true);
    expect(usageRange('2026-01-01', '2026-04-01', NOW)).toMatchObject({ ok: false, reason: 'range_too_long' });
    expect(usageRange('2026-02-01', '2026-01-31', NOW)).toMatchObject({ ok: false, reason: 'range_reversed' });
  });

  it('never leaves the days a four-digit year can name', () => {
    expect(usageRange('9999-12-31', undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '9999-12-31', toDay: '9999-12-31' },
    });
    expect(usageRange('9999-12-01', undefined, NOW)).toEqual({
      ok: true,
      value: { fromDay: '9999-12-01', toDay: '9999-12-01' },
    });
    expect(usageRange(undefined, '0000-01-10', NOW)).toEqual({
      ok: true,
      value: { fromDay: '0000-01-01', toDay: '0000-01-10' },
    });
  });
});

describe('targetOriginAndPath', () => {
  it('keeps the origin and path, never the query string, the fragment or credentials', () => {
    expect(targetOriginAndPath('https://user:pw@API.example.com:443/a/b?token=secret#x')).toEqual({
      origin: 'https://api.example.com',
      path: '/a/b',
    });
    expect(targetOriginAndPath('not a url')).toBeNull();
  });
});

describe('explorerUrl', () => {
  const publicChain: NetworkSettings[] = [{ name: 'base', rpcUrl: 'https://mainnet.base.org', usdc: '0x' }];
  const localChain: NetworkSettings[] = [{ name: 'base', rpcUrl: 'http://127.0.0.1:8545', usdc: '0x' }];
  it('links a transaction on a public chain to its explorer, and none on a local chain or an unknown network', () => {
    expect(explorerUrl('base', '0xabc', publicChain)).toBe('https://basescan.org/tx/0xabc');
    expect(explorerUrl('base', '0xabc', localChain)).toBeNull();
    expect(explorerUrl('base', null, publicChain)).toBeNull();
    expect(
      explorerUrl('skale-base', '0xabc', [{ name: 'skale-base', rpcUrl: 'https://x.example', usdc: '0x' }]),
    ).toBeNull();
  });
});
