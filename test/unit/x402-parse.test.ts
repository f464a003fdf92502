import { describe, expect, it } from 'vitest';
import {
  MAX_ACCEPTS_ENTRIES,
  MAX_PAYMENT_REQUIRED_BODY_CHARS,
  readTargetPaymentRequired,
} from '../../payments/x402/parse';

/** A target's 402 body (version 1), read as /proxy and /relay read it when no PAYMENT-REQUIRED header came. */
const read = (input: unknown) => readTargetPaymentRequired(undefined, input);

const baseSepolia = {
  scheme: 'exact',
  network: 'base-sepolia',
  maxAmountRequired: '10000',
  resource: 'http://127.0.0.1:4021/weather',
  description: 'Weather report',
  mimeType: 'application/json',
  payTo: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
  maxTimeoutSeconds: 60,
  asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  outputSchema: { input: { type: 'http', method: 'GET' } },
  extra: { name: 'USDC', version: '2' },
};

const solanaDevnet = {
  scheme: 'exact',
  network: 'solana-devnet',
  maxAmountRequired: '2500',
  resource: 'http://127.0.0.1:4021/weather',
  description: '',
  mimeType: '',
  payTo: '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin',
  maxTimeoutSeconds: 60,
  asset: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
  extra: { feePayer: '2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4' },
};

function body(accepts: unknown[], extra: Record<string, unknown> = {}) {
  return { x402Version: 1, error: 'X-PAYMENT header is required', accepts, ...extra };
}

describe('a version 1 402 body', () => {
  it('reads a valid body given as an object or as JSON text, keeping entries as sent', () => {
    for (const input of [body([baseSepolia, solanaDevnet]), JSON.stringify(body([baseSepolia, solanaDevnet]))]) {
      expect(read(input)).toEqual({
        x402Version: 1,
        error: 'X-PAYMENT header is required',
        accepts: [baseSepolia, solanaDevnet],
        skipped: [],
      });
    }
  });

  it('drops fields that x402 v1 does not define and treats null extra as absent', () => {
    const parsed = read(body([{ ...baseSepolia, extra: null, surprise: 'x' }]));
    const withoutExtra: Record<string, unknown> = { ...baseSepolia };
    delete withoutExtra.extra;
    expect(parsed?.accepts[0]).toStrictEqual(withoutExtra);
  });

  it.each([
    [{ ...body([baseSepolia]), x402Version: 2 }, 'unsupported_x402_version'],
    [{ accepts: [baseSepolia] }, 'unsupported_x402_version'],
    [{ ...body([baseSepolia]), x402Version: '1' }, 'unsupported_x402_version'],
    [{ x402Version: 1 }, 'missing_accepts'],
    [{ x402Version: 1, accepts: { 0: baseSepolia } }, 'missing_accepts'],
    [[body([baseSepolia])], 'not_an_object'],
    [null, 'not_an_object'],
    ['{"x402Version":1,', 'invalid_json'],
    // Valid JSON of a valid body, but past the bound.
    [JSON.stringify(body([baseSepolia], { padding: 'x'.repeat(MAX_PAYMENT_REQUIRED_BODY_CHARS) })), 'body_too_large'],
  ])('refuses the whole body %#: %s, not an x402 402', (input, reason) => {
    expect(read(input), reason).toBeUndefined();
  });

  it('reads a body just within the bound', () => {
    const padded = (length: number) => JSON.stringify(body([baseSepolia], { padding: 'x'.repeat(length) }));
    const within = padded(MAX_PAYMENT_REQUIRED_BODY_CHARS - padded(0).length);
    expect(within.length).toBe(MAX_PAYMENT_REQUIRED_BODY_CHARS);
    expect(read(within)?.accepts).toEqual([baseSepolia]);
  });

  it.each([
    [{ ...baseSepolia, maxAmountRequired: '1.5' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: '-1' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: '' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: '0010' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: '1e6' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: ' 100' }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: (1n << 256n).toString() }, 'invalid_amount', 'maxAmountRequired'],
    [{ ...baseSepolia, maxAmountRequired: 10000 }, 'invalid_field', 'maxAmountRequired'],
    [{ ...baseSepolia, payTo: undefined }, 'missing_field', 'payTo'],
    [{ ...baseSepolia, description: undefined }, 'missing_field', 'description'],
    [{ ...baseSepolia, mimeType: undefined }, 'missing_field', 'mimeType'],
    [{ ...baseSepolia, asset: '' }, 'invalid_field', 'asset'],
    [{ ...baseSepolia, network: 7 }, 'invalid_field', 'network'],
    [{ ...baseSepolia, maxTimeoutSeconds: undefined }, 'missing_field', 'maxTimeoutSeconds'],
    [{ ...baseSepolia, maxTimeoutSeconds: 0 }, 'invalid_field', 'maxTimeoutSeconds'],
    [{ ...baseSepolia, maxTimeoutSeconds: 1.5 }, 'invalid_field', 'maxTimeoutSeconds'],
    [{ ...baseSepolia, maxTimeoutSeconds: '60' }, 'invalid_field', 'maxTimeoutSeconds'],
    [{ ...baseSepolia, extra: 'USDC' }, 'invalid_field', 'extra'],
    [{ ...baseSepolia, extra: ['USDC'] }, 'invalid_field', 'extra'],
  ])('skips a bad entry %# with a reason and keeps the good ones', (bad, reason, field) => {
    const parsed = read(body([solanaDevnet, bad, baseSepolia]));
    expect(parsed?.accepts).toEqual([solanaDevnet, baseSepolia]);
    expect(parsed?.skipped).toEqual([{ index: 1, reason, field, details: expect.any(String) }]);
  });

  it('skips entries that are not objects and entries past the bound', () => {
    const many = Array.from({ length: MAX_ACCEPTS_ENTRIES + 2 }, () => baseSepolia);
    many[0] = 'exact' as never;
    const parsed = read(body(many));
    expect(parsed?.accepts).toHaveLength(MAX_ACCEPTS_ENTRIES - 1);
    expect(parsed?.skipped.map(({ index, reason }) => [index, reason])).toEqual([
      [0, 'not_an_object'],
      [MAX_ACCEPTS_ENTRIES, 'too_many_entries'],
      [MAX_ACCEPTS_ENTRIES + 1, 'too_many_entries'],
    ]);
  });

  it('keeps entries of networks and schemes it does not pay: that is the choice to refuse', () => {
    const other = { ...baseSepolia, network: 'polygon', scheme: 'upto' };
    expect(read(body([other]))?.accepts).toEqual([other]);
  });
});
