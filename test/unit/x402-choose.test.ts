import { describe, expect, it } from 'vitest';
import type { NetworkSettings } from '../../payments/basics/config';
import { chooseRequirement, type ChoiceOptions } from '../../payments/x402/choose';
import type { PaymentRequirements } from '../../payments/x402/types';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const networks: NetworkSettings[] = [
  { name: 'base', rpcUrl: 'http://127.0.0.1:1', usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' },
  { name: 'base-sepolia', rpcUrl: 'http://127.0.0.1:2', usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' },
  { name: 'skale-base-sepolia', rpcUrl: 'http://127.0.0.1:3', usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD' },
  { name: 'solana', rpcUrl: 'http://127.0.0.1:4', usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v' },
  { name: 'solana-devnet', rpcUrl: 'http://127.0.0.1:5', usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU' },
];

function evm(network: string, amount: string, changes: Partial<PaymentRequirements> = {}): PaymentRequirements {
  const usdc =
    networks.find((settings) => settings.name === network)?.usdc ?? '0x036CbD53842c5426634e7929541eC2318f3dCF7e';
  return {
    scheme: 'exact',
    network,
    maxAmountRequired: amount,
    resource: 'http://127.0.0.1:4021/paid',
    description: '',
    mimeType: 'application/json',
    payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
    maxTimeoutSeconds: 60,
    asset: usdc,
    extra: { name: 'USDC', version: '2' },
    ...changes,
  };
}

function svm(network: string, amount: string, changes: Partial<PaymentRequirements> = {}): PaymentRequirements {
  const usdc =
    network === 'solana-devnet'
      ? '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU'
      : 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v';
  return {
    scheme: 'exact',
    network,
    maxAmountRequired: amount,
    resource: 'http://127.0.0.1:4021/paid',
    description: '',
    mimeType: 'application/json',
    payTo: '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin',
    maxTimeoutSeconds: 60,
    asset: usdc,
    extra: { feePayer: '2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4' },
    ...changes,
  };
}

const options: ChoiceOptions = { networks, maxAmountMicroUsdc: 1_000_000n, schemes: PAYMENT_SCHEMES };

function refusalsOf(accepts: PaymentRequirements[], choiceOptions: ChoiceOptions = options) {
  const choice = chooseRequirement(accepts, choiceOptions);
  expect(choice.ok).toBe(false);
  return choice.ok ? [] : choice.refusals.map(({ index, reason }) => [index, reason]);
}

describe('chooseRequirement', () => {
  it('pays the only payable entry and reports its amount as bigint micro-USDC', () => {
    const choice = chooseRequirement([evm('base-sepolia', '10000')], options);
    expect(choice).toEqual({
      ok: true,
      value: {
        requirements: evm('base-sepolia', '10000'),
        index: 0,
        network: 'base-sepolia',
        chainType: 'evm',
        networkClass: 'testnet',
        amountMicroUsdc: 10_000n,
      },
    });
  });

  it('prefers the given network order over price', () => {
    const accepts = [evm('base-sepolia', '500'), svm('solana-devnet', '900'), evm('skale-base-sepolia', '100')];
    const pick = (preferredNetworks: ChoiceOptions['preferredNetworks']) => {
      const choice = chooseRequirement(accepts, { ...options, preferredNetworks });
      return choice.ok ? choice.value.index : -1;
    };
    expect(pick(['solana-devnet', 'base-sepolia'])).toBe(1);
    expect(pick(['base-sepolia'])).toBe(0);
    expect(pick(['base'])).toBe(2);
    expect(pick(undefined)).toBe(2);
  });

  it('takes the cheapest among equally preferred entries, then the target order', () => {
    const accepts = [evm('base-sepolia', '700'), svm('solana-devnet', '300'), evm('skale-base-sepolia', '300')];
    const choice = chooseRequirement(accepts, options);
    expect(choice.ok && [choice.value.index, choice.value.amountMicroUsdc]).toEqual([1, 300n]);
  });

  it('accepts the Solana mainnet aliases and keeps the name the target used', () => {
    for (const alias of ['solana', 'solana-mainnet', 'solana-mainnet-beta']) {
      const choice = chooseRequirement([svm(alias, '1000')], options);
      expect(choice.ok && [choice.value.network, choice.value.requirements.network]).toEqual(['solana', alias]);
    }
  });

  it('matches EVM assets case-insensitively, Solana mints exactly', () => {
    expect(
      chooseRequirement([evm('base-sepolia', '1', { asset: '0x036cbd53842c5426634e7929541ec2318f3dcf7e' })], options)
        .ok,
    ).toBe(true);
    expect(refusalsOf([svm('solana', '1', { asset: 'epjfwdd5aufqssqem2qn1xzybapc8g4wegGkZwyTDt1v' })])).toEqual([
      [0, 'asset_mismatch'],
    ]);
  });

  it('refuses an asset that is not the configured USDC', () => {
    expect(refusalsOf([evm('base-sepolia', '1', { asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' })])).toEqual([
      [0, 'asset_mismatch'],
    ]);
    expect(refusalsOf([svm('solana-devnet', '1', { asset: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v' })])).toEqual([
      [0, 'asset_mismatch'],
    ]);
  });

  it('uses the configured USDC address, not the table default', () => {
    const overridden = networks.map((settings) =>
      settings.name === 'base-sepolia' ? { ...settings, usdc: '0x1111111111111111111111111111111111111111' } : settings,
    );
    expect(refusalsOf([evm('base-sepolia', '1')], { ...options, networks: overridden })).toEqual([
      [0, 'asset_mismatch'],
    ]);
    expect(
      chooseRequirement([evm('base-sepolia', '1', { asset: '0x1111111111111111111111111111111111111111' })], {
        ...options,
        networks: overridden,
      }).ok,
    ).toBe(true);
  });

  it('refuses amounts over the ceiling, and accepts one exactly at it', () => {
    expect(refusalsOf([evm('base-sepolia', '1000001')])).toEqual([[0, 'amount_over_ceiling']]);
    expect(chooseRequirement([evm('base-sepolia', '1000000')], options).ok).toBe(true);
  });

  it('refuses zero and non-integer amounts', () => {
    expect(refusalsOf([evm('base-sepolia', '0'), evm('base-sepolia', '1.5'), evm('base-sepolia', '')])).toEqual([
      [0, 'invalid_amount'],
      [1, 'invalid_amount'],
      [2, 'invalid_amount'],
    ]);
  });

  it('refuses disabled and unknown networks and other schemes', () => {
    expect(
      refusalsOf([evm('skale-base', '1'), evm('gnosis', '1'), evm('base-sepolia', '1', { scheme: 'upto' })]),
    ).toEqual([
      [0, 'network_not_enabled'],
      [1, 'unknown_network'],
      [2, 'unsupported_scheme'],
    ]);
    const withoutBase = networks.filter((settings) => settings.name !== 'base-sepolia');
    expect(refusalsOf([evm('base-sepolia', '1')], { ...options, networks: withoutBase })).toEqual([
      [0, 'network_not_enabled'],
    ]);
  });

  it('chooses a Permit2 offer and refuses a transfer method no scheme of ours pays with, by the offer or by its network', () => {
    const megaUsd = '0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7';
    const withMegaeth: ChoiceOptions = {
      ...options,
      networks: [...networks, { name: 'megaeth', rpcUrl: 'http://127.0.0.1:6', usdc: megaUsd }],
    };
    // 0.001 MegaUSD (18 decimals): 1,000 micro-USDC.
    const permit2Offer = evm('megaeth', '1000000000000000', {
      asset: megaUsd,
      extra: { name: 'MegaUSD', version: '1', assetTransferMethod: 'permit2' },
    });
    expect(chooseRequirement([permit2Offer], withMegaeth).ok).toBe(true);
    // A lookup whose EVM scheme pays by EIP-3009 only: the refusal names the method.
    const eip3009Only: ChoiceOptions = {
      ...withMegaeth,
      schemes: {
        scheme: (network, scheme) => {
          const found = PAYMENT_SCHEMES.scheme(network, scheme);
          return found && { ...found, transferMethods: found.transferMethods.filter((method) => method !== 'permit2') };
        },
        schemeOfPayload: (payload) => PAYMENT_SCHEMES.schemeOfPayload(payload),
      },
    };
    expect(
      refusalsOf(
        [
          evm('base', '1', { extra: { name: 'USD Coin', version: '2', assetTransferMethod: 'permit2' } }),
          evm('megaeth', '1', { asset: megaUsd, extra: { name: 'MegaUSD', version: '1' } }),
        ],
        eip3009Only,
      ),
    ).toEqual([
      [0, 'unsupported_transfer_method'],
      [1, 'unsupported_transfer_method'],
    ]);
    const choice = chooseRequirement([permit2Offer], eip3009Only);
    expect(!choice.ok && choice.refusals[0]!.details).toBe(
      'MegaUSD on megaeth is paid by the permit2 transfer method, which this service does not pay with (it pays by eip3009)',
    );
  });

  describe('upto offers (x402 version 2)', () => {
    const amoyUsdc = '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582';
    const megaUsd = '0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7';
    const facilitatorAddress = '0x1111111111111111111111111111111111111111';
    const withOptIn: ChoiceOptions = {
      ...options,
      networks: [
        ...networks,
        { name: 'polygon-amoy', rpcUrl: 'http://127.0.0.1:7', usdc: amoyUsdc },
        { name: 'megaeth', rpcUrl: 'http://127.0.0.1:6', usdc: megaUsd },
      ],
      x402Version: 2,
    };
    // As @x402/express 2.27 offers upto: extra names the token's domain, Permit2 and the facilitator.
    const upto = (network: string, amount: string, changes: Partial<PaymentRequirements> = {}) =>
      evm(network, amount, {
        scheme: 'upto',
        asset: network === 'megaeth' ? megaUsd : amoyUsdc,
        extra: { name: 'USDC', version: '2', assetTransferMethod: 'permit2', facilitatorAddress },
        ...changes,
      });

    it('chooses an upto offer, its maximum counted in micro-USDC by the asset decimals (6 and 18)', () => {
      const amoy = chooseRequirement([upto('polygon-amoy', '20000')], withOptIn);
      expect(amoy).toMatchObject({
        ok: true,
        value: { network: 'polygon-amoy', amountMicroUsdc: 20_000n, requirements: { scheme: 'upto' } },
      });
      // 0.02 MegaUSD (18 decimals): 20,000 micro-USDC.
      const mega = chooseRequirement([upto('megaeth', '20000000000000000')], withOptIn);
      expect(mega).toMatchObject({ ok: true, value: { network: 'megaeth', amountMicroUsdc: 20_000n } });
    });

    it('pays upto through Permit2 when the offer names no transfer method, on a network whose own method is EIP-3009', () => {
      const offer = upto('polygon-amoy', '20000', { extra: { name: 'USDC', version: '2', facilitatorAddress } });
      expect(chooseRequirement([offer], withOptIn).ok).toBe(true);
    });

    it('refuses upto in a version 1 402, an upto maximum over the ceiling, and an offer without a usable facilitator', () => {
      expect(refusalsOf([upto('polygon-amoy', '20000')], { ...withOptIn, x402Version: 1 })).toEqual([
        [0, 'unsupported_scheme'],
      ]);
      // The ceiling holds the maximum, whatever the target will settle.
      expect(refusalsOf([upto('polygon-amoy', '20000')], { ...withOptIn, maxAmountMicroUsdc: 19_999n })).toEqual([
        [0, 'amount_over_ceiling'],
      ]);
      expect(
        refusalsOf(
          [
            upto('polygon-amoy', '1', { extra: { assetTransferMethod: 'permit2' } }),
            upto('polygon-amoy', '1', { extra: { assetTransferMethod: 'permit2', facilitatorAddress: 'nobody' } }),
            upto('polygon-amoy', '1', { payTo: '0x0000000000000000000000000000000000000000' }),
            upto('polygon-amoy', '1', { extra: { assetTransferMethod: 'eip3009', facilitatorAddress } }),
            upto('polygon-amoy', '1', { asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' }),
          ],
          withOptIn,
        ),
      ).toEqual([
        [0, 'missing_facilitator'],
        [1, 'invalid_facilitator'],
        [2, 'invalid_pay_to'],
        [3, 'unsupported_transfer_method'],
        [4, 'asset_mismatch'],
      ]);
    });

    it('refuses upto where no upto scheme is registered, and any other scheme by name', () => {
      const exactOnly: ChoiceOptions = {
        ...withOptIn,
        schemes: {
          scheme: (network, scheme) => (scheme === 'exact' ? PAYMENT_SCHEMES.scheme(network, scheme) : undefined),
          schemeOfPayload: (payload) => PAYMENT_SCHEMES.schemeOfPayload(payload),
        },
      };
      expect(refusalsOf([upto('polygon-amoy', '20000')], exactOnly)).toEqual([[0, 'unsupported_scheme']]);
      const choice = chooseRequirement([upto('polygon-amoy', '1', { scheme: 'deferred' })], withOptIn);
      expect(!choice.ok && choice.refusals[0]!.details).toBe(
        'scheme "deferred" is none of exact, upto and batch-settlement',
      );
    });

    it("prefers the cheaper of an exact and an upto offer on the same network, the target's order breaking ties", () => {
      const exact = evm('polygon-amoy', '20000', { asset: amoyUsdc });
      expect(chooseRequirement([upto('polygon-amoy', '20000'), exact], withOptIn)).toMatchObject({
        ok: true,
        value: { index: 0, requirements: { scheme: 'upto' } },
      });
      expect(chooseRequirement([upto('polygon-amoy', '20001'), exact], withOptIn)).toMatchObject({
        ok: true,
        value: { index: 1, requirements: { scheme: 'exact' } },
      });
    });
  });

  it('refuses Solana entries without a usable fee payer', () => {
    expect(
      refusalsOf([
        svm('solana-devnet', '1', { extra: {} }),
        svm('solana-devnet', '1', { extra: undefined }),
        svm('solana-devnet', '1', { extra: { feePayer: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C' } }),
      ]),
    ).toEqual([
      [0, 'missing_fee_payer'],
      [1, 'missing_fee_payer'],
      [2, 'invalid_fee_payer'],
    ]);
  });

  it('refuses payTo addresses of the wrong chain type or the zero address', () => {
    expect(
      refusalsOf([
        evm('base-sepolia', '1', { payTo: '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin' }),
        evm('base-sepolia', '1', { payTo: '0x0000000000000000000000000000000000000000' }),
        evm('base-sepolia', '1', { payTo: '0x209693bc6afc0c5328ba36faf03c514ef312287C' }),
        svm('solana-devnet', '1', { payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C' }),
      ]),
    ).toEqual([
      [0, 'invalid_pay_to'],
      [1, 'invalid_pay_to'],
      [2, 'invalid_pay_to'],
      [3, 'invalid_pay_to'],
    ]);
  });

  it('refuses authorizations that would stay valid too long', () => {
    expect(refusalsOf([evm('base-sepolia', '1', { maxTimeoutSeconds: 3601 })])).toEqual([[0, 'timeout_too_long']]);
    expect(
      chooseRequirement([evm('base-sepolia', '1', { maxTimeoutSeconds: 7200 })], {
        ...options,
        maxTimeoutSeconds: 7200,
      }).ok,
    ).toBe(true);
  });

  it('lists why each entry was refused, and says when there was nothing to choose from', () => {
    const choice = chooseRequirement(
      [evm('base-sepolia', '5000000'), svm('solana-devnet', '1', { extra: {} })],
      options,
    );
    expect(choice).toMatchObject({
      ok: false,
      reason: 'no_payable_requirement',
      refusals: [
        { index: 0, network: 'base-sepolia', reason: 'amount_over_ceiling' },
        { index: 1, network: 'solana-devnet', reason: 'missing_fee_payer' },
      ],
    });
    expect(choice.ok ? '' : choice.details).toContain('amount_over_ceiling');
    expect(chooseRequirement([], options)).toMatchObject({ ok: false, reason: 'no_payable_requirement', refusals: [] });
  });

  it('skips refused entries and still pays a payable one', () => {
    const choice = chooseRequirement([evm('base-sepolia', '5000000'), evm('base', '20')], options);
    expect(choice.ok && [choice.value.index, choice.value.network]).toEqual([1, 'base']);
  });
});
