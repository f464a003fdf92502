// The x402 extensions' wire shapes (payments/x402/extensions.ts) held to @x402/extensions 2.27: the
// payment-identifier declaration of our 402s, its id rule, the id added to a target's declaration
// as the package's client adds it, and a target's bazaar metadata bounded.
import {
  appendPaymentIdentifierToExtensions,
  declarePaymentIdentifierExtension,
  isValidPaymentId as packageIsValid,
} from '@x402/extensions/payment-identifier';
import { describe, expect, it } from 'vitest';
import {
  extensionsForTarget,
  MAX_BAZAAR_JSON_CHARS,
  ourPaymentId,
  PAYMENT_IDENTIFIER,
  paymentIdentifierDeclaration,
  paymentIdentifierOf,
  withBazaar,
} from '../../payments/x402/extensions';

/** Whether a payment carrying `id` in payment-identifier is read as carrying that id. */
const accepted = (id: string) => paymentIdentifierOf({ [PAYMENT_IDENTIFIER]: { info: { required: false, id } } }).ok;

/** The dry runs' bazaar of a version 2 402 with these extensions. */
const bazaarOf = (extensions: Record<string, unknown> | undefined) =>
  withBazaar({ x402Version: 2, accepts: [], offers: [], skipped: [], ...(extensions ? { extensions } : {}) }).bazaar;

describe('payment-identifier', () => {
  it('our declaration is the one @x402/extensions declares for an optional id', () => {
    expect(paymentIdentifierDeclaration()).toEqual(declarePaymentIdentifierExtension(false));
    // A fresh object each time: a client's step writes its id into the one it read.
    expect(paymentIdentifierDeclaration()).not.toBe(paymentIdentifierDeclaration());
  });

  it('accepts exactly the ids the package accepts', () => {
    const ids = [
      'a'.repeat(15),
      'a'.repeat(16),
      'a'.repeat(128),
      'a'.repeat(129),
      'pay_7d5d747be160e280504c099d984bcfe0',
      'with space 123456789',
      'dots.are.not.allowed',
      'ünïcödé_ünïcödé_ünïcödé',
      '0123456789-_ABCDEFabcdef',
    ];
    for (const id of ids) expect(accepted(id), id).toBe(packageIsValid(id));
  });

  it("reads a payment's id: absent, echoed without one, valid, or refused", () => {
    expect(paymentIdentifierOf(undefined)).toEqual({ ok: true, value: undefined });
    expect(paymentIdentifierOf({ other: { info: {} } })).toEqual({ ok: true, value: undefined });
    expect(paymentIdentifierOf({ [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) })).toEqual({
      ok: true,
      value: undefined,
    });
    const extensions = { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) } as Record<string, unknown>;
    appendPaymentIdentifierToExtensions(extensions, 'pay_0123456789abcdef');
    expect(paymentIdentifierOf(extensions)).toEqual({ ok: true, value: 'pay_0123456789abcdef' });
    for (const bad of [
      { [PAYMENT_IDENTIFIER]: { info: { required: false, id: 'short' } } },
      { [PAYMENT_IDENTIFIER]: { info: { required: false, id: 1234567890123456 } } },
      { [PAYMENT_IDENTIFIER]: 'pay_0123456789abcdef' },
    ])
      expect(paymentIdentifierOf(bad)).toMatchObject({ ok: false, reason: 'invalid_payment_identifier' });
  });

  it("adds our id to a target's declaration as the package's client does, leaving the target's objects and other extensions alone", () => {
    const declared = {
      [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(true),
      bazaar: { info: { input: { type: 'http' } } },
      'x-unknown': { anything: [1] },
    } as Record<string, unknown>;
    const before = structuredClone(declared);
    const id = ourPaymentId('base', `0x${'ab'.repeat(32)}`);
    const ours = extensionsForTarget(declared, id);
    expect(declared).toEqual(before);
    const theirs = structuredClone(declared);
    appendPaymentIdentifierToExtensions(theirs, id);
    expect(ours).toEqual(theirs);
    // No declaration: the extensions as they came, no id.
    expect(extensionsForTarget({ 'x-unknown': { a: 1 } }, id)).toEqual({ 'x-unknown': { a: 1 } });
    expect(extensionsForTarget(undefined, id)).toBeUndefined();
  });

  it('our id is valid, the same for the same payment and another for another', () => {
    const id = ourPaymentId('base', '0x01');
    expect(packageIsValid(id)).toBe(true);
    expect(ourPaymentId('base', '0x01')).toBe(id);
    expect(ourPaymentId('base', '0x02')).not.toBe(id);
    expect(ourPaymentId('base-sepolia', '0x01')).not.toBe(id);
  });
});

describe('bazaar', () => {
  it("passes a target's metadata on as sent, and nothing larger than the bound", () => {
    const bazaar = { info: { input: { type: 'http', method: 'GET' }, output: { example: { a: 1 } } }, schema: {} };
    expect(bazaarOf({ bazaar })).toEqual(bazaar);
    expect(bazaarOf({ bazaar: 'not an object' })).toBeUndefined();
    expect(bazaarOf(undefined)).toBeUndefined();
    // A version 1 402 has no extensions.
    expect(withBazaar({ x402Version: 1, accepts: [], skipped: [] })).toEqual({});
    expect(bazaarOf({ bazaar: { info: { blob: 'x'.repeat(MAX_BAZAAR_JSON_CHARS) } } })).toBeUndefined();
  });
});
