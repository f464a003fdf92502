// PAYMENT-SIGNATURE (x402 version 2) read strictly and matched against our offers, and the /settle
// body a facilitator gets in each version.
import { describe, expect, it } from 'vitest';
import { decodeClientPayment, paymentForOffers } from '../../payments/incoming/clientPayment';
import { settleRequestBody } from '../../payments/incoming/facilitator';
import { decodePaymentSignatureHeader } from '../../payments/x402/headers';
import type { PaymentRequirements } from '../../payments/x402/types';
import { requirementsToV2 } from '../../payments/x402/v2';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const base64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64');

const offer: PaymentRequirements = {
  scheme: 'exact',
  network: 'base',
  maxAmountRequired: '10300',
  resource: 'http://127.0.0.1:1/relay',
  description: 'Relay of GET http://127.0.0.1:2/paid',
  mimeType: 'application/json',
  payTo: '0x2222222222222222222222222222222222222222',
  maxTimeoutSeconds: 300,
  asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
  extra: { name: 'USD Coin', version: '2' },
};
const solanaOffer: PaymentRequirements = {
  ...offer,
  network: 'solana',
  payTo: 'So11111111111111111111111111111111111111112',
  asset: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v',
  extra: { feePayer: 'So11111111111111111111111111111111111111112' },
};
const payload = {
  signature: `0x${'ab'.repeat(65)}`,
  authorization: {
    from: '0x1111111111111111111111111111111111111111',
    to: offer.payTo,
    value: '10300',
    validAfter: '0',
    validBefore: '99999999999',
    nonce: `0x${'01'.repeat(32)}`,
  },
};
const accepted = requirementsToV2(offer);
const signature = (overrides: Record<string, unknown> = {}) =>
  base64({ x402Version: 2, resource: { url: offer.resource }, accepted, payload, ...overrides });

describe('decodePaymentSignatureHeader', () => {
  it('reads a version 2 payment: accepted, payload, resource', () => {
    expect(decodePaymentSignatureHeader(signature(), PAYMENT_SCHEMES)).toEqual({
      ok: true,
      value: { x402Version: 2, resource: { url: offer.resource }, accepted, payload },
    });
  });

  it.each([
    ['not base64', 'invalid_header', '%%%'],
    ['not JSON', 'invalid_json', Buffer.from('{').toString('base64')],
    ['version 1', 'unsupported_x402_version', signature({ x402Version: 1 })],
    ['no accepted', 'invalid_payload', signature({ accepted: undefined })],
    ['a scheme nobody registered', 'unsupported_scheme', signature({ accepted: { ...accepted, scheme: 'deferred' } })],
    ['upto with an exact payload', 'invalid_payload', signature({ accepted: { ...accepted, scheme: 'upto' } })],
    ['an unknown network', 'unknown_network', signature({ accepted: { ...accepted, network: 'eip155:61' } })],
    ['an amount that is not digits', 'invalid_payload', signature({ accepted: { ...accepted, amount: '1e4' } })],
    [
      'a timeout that is not an integer',
      'invalid_payload',
      signature({ accepted: { ...accepted, maxTimeoutSeconds: 1.5 } }),
    ],
    ['no extra', 'invalid_payload', signature({ accepted: { ...accepted, extra: undefined } })],
    ['a resource without url', 'invalid_payload', signature({ resource: { description: 'x' } })],
    ['a bad signature', 'invalid_payload', signature({ payload: { ...payload, signature: 'zz' } })],
    [
      'a short nonce',
      'invalid_payload',
      signature({ payload: { ...payload, authorization: { ...payload.authorization, nonce: '0x01' } } }),
    ],
    ['a Solana payload on EVM', 'invalid_payload', signature({ payload: { transaction: 'AAAA' } })],
  ])('refuses %s (%s)', (_case, reason, header) => {
    expect(decodePaymentSignatureHeader(header, PAYMENT_SCHEMES)).toMatchObject({ ok: false, reason });
  });
});

describe('paymentForOffers', () => {
  it('a version 2 payment is the version 1 payment of the offer its accepted equals, named as we name it', () => {
    const decoded = decodeClientPayment({ version: 2, value: signature() });
    if (!decoded.ok) throw new Error(decoded.details);
    expect(paymentForOffers(decoded.value, [solanaOffer, offer])).toEqual({
      ok: true,
      value: { payment: { x402Version: 1, scheme: 'exact', network: 'base', payload }, offered: [offer] },
    });
  });

  it('an accepted that differs from every offer in any field is refused', () => {
    for (const changed of [
      { amount: '10299' },
      { maxTimeoutSeconds: 301 },
      { extra: { name: 'USD Coin', version: '2', more: 1 } },
      { payTo: '0x3333333333333333333333333333333333333333' },
      { network: 'base' },
    ]) {
      const decoded = decodeClientPayment({ version: 2, value: signature({ accepted: { ...accepted, ...changed } }) });
      if (!decoded.ok) throw new Error(decoded.details);
      expect(paymentForOffers(decoded.value, [offer]), JSON.stringify(changed)).toMatchObject({
        ok: false,
        reason: 'offer_mismatch',
      });
    }
  });

  it('matches an accepted to an offer whatever the order of its keys and absent keys, on nothing else', () => {
    const paidWith = (acceptedNow: Record<string, unknown>) => {
      const decoded = decodeClientPayment({ version: 2, value: signature({ accepted: acceptedNow }) });
      if (!decoded.ok) throw new Error(decoded.details);
      return decoded.value;
    };
    const reordered = Object.fromEntries(Object.entries(accepted).reverse());
    expect(paymentForOffers(paidWith(reordered), [offer]).ok).toBe(true);
    // A field of ours that is undefined is no field.
    expect(paymentForOffers(paidWith(accepted), [{ ...offer, outputSchema: undefined }]).ok).toBe(true);
    const cases: Array<[Record<string, unknown>, Record<string, unknown>, boolean]> = [
      [{ more: { a: 1, b: [1, { c: 2 }] } }, { more: { b: [1, { c: 2 }], a: 1 } }, true],
      [{ more: '1' }, { more: 1 }, false],
      [{ more: [1, 2] }, { more: [2, 1] }, false],
      [{ more: {} }, { more: [] }, false],
    ];
    for (const [ours, theirs, matches] of cases) {
      const ourOffer = { ...offer, extra: { ...offer.extra, ...ours } };
      const payment = paidWith({ ...accepted, extra: { ...accepted.extra, ...theirs } });
      expect(paymentForOffers(payment, [ourOffer]).ok, JSON.stringify([ours, theirs])).toBe(matches);
    }
  });
});

describe('the /settle body of either version', () => {
  it('a version 2 /settle body carries the payment and the requirements in version 2 form', () => {
    const payment = { x402Version: 1 as const, scheme: 'exact' as const, network: 'base', payload };
    expect(settleRequestBody(payment, offer, 2)).toEqual({
      x402Version: 2,
      paymentPayload: {
        x402Version: 2,
        resource: { url: offer.resource, description: offer.description, mimeType: offer.mimeType },
        accepted,
        payload,
      },
      paymentRequirements: accepted,
    });
    expect(settleRequestBody(payment, offer, 1)).toEqual({
      x402Version: 1,
      paymentPayload: payment,
      paymentRequirements: offer,
    });
  });
});
