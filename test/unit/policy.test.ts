// The ceiling of a call and a key's policy (payments/accounts/policy.ts): which hosts an entry allows, and
// which of the three limits refuses a price.
import { describe, expect, it } from 'vitest';
import { ceilingRefusal, hostRefusal, priceRefusal, type KeyPolicy } from '../../payments/accounts/policy';

const policy = (rules: Partial<KeyPolicy>): KeyPolicy => ({
  defaultMaxMicroUsdc: null,
  hardMaxMicroUsdc: null,
  allowedHosts: null,
  ...rules,
});

describe('allowed hosts', () => {
  const limits = { policy: policy({ allowedHosts: ['example.org', '127.0.0.1:4010'] }), keyPrefix: 'prs_x' };
  it.each([
    ['https://example.org/a?b=c', true],
    ['https://api.EXAMPLE.org/a', true],
    ['https://badexample.org/', false],
    ['https://example.org.evil.com/', false],
    ['http://127.0.0.1:4010/paid', true],
    ['http://127.0.0.1:4011/paid', false],
    ['http://127.0.0.1/paid', false],
  ])('%s allowed: %s', (url, allowed) => {
    expect(hostRefusal(limits, url) === undefined).toBe(allowed);
  });

  it('no policy allows every host', () => {
    expect(hostRefusal({}, 'https://anything.example/')).toBeUndefined();
  });
});

describe('a price', () => {
  it('above the hard maximum is refused by the policy, whatever max_amount says', () => {
    const refusal = priceRefusal(
      { maxAmountMicroUsdc: 10_000n, policy: policy({ hardMaxMicroUsdc: 100n }) },
      101n,
      'base',
    );
    expect(refusal?.kind).toBe('policy_refused');
  });

  it("above max_amount, else above the key's default, is price_above_limit", () => {
    const defaults = policy({ defaultMaxMicroUsdc: 50n });
    expect(priceRefusal({ maxAmountMicroUsdc: 60n, policy: defaults }, 55n, 'base')).toBeUndefined();
    expect(priceRefusal({ policy: defaults }, 55n, 'base')).toMatchObject({
      kind: 'price_above_limit',
      priceMicroUsdc: 55n,
      maxAmountMicroUsdc: 50n,
    });
    expect(ceilingRefusal(55n, 55n, 'base')).toBeUndefined();
    expect(ceilingRefusal(undefined, 10n ** 12n, 'base')).toBeUndefined();
  });
});
