import { describe, expect, it } from 'vitest';
import {
  decodePaymentHeader,
  decodePaymentResponseHeader,
  encodePaymentHeader,
  encodePaymentResponseHeader,
  MAX_PAYMENT_HEADER_CHARS,
} from '../../payments/x402/headers';
import type { PaymentPayload } from '../../payments/x402/types';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const evmPayment: PaymentPayload = {
  x402Version: 1,
  scheme: 'exact',
  network: 'base-sepolia',
  payload: {
    signature: `0x${'ab'.repeat(65)}`,
    authorization: {
      from: '0x857b06519E91e3A54538791bDbb0E22373e36b66',
      to: '0x209693Bc6afc0C5328bA36FaF03C514EF312287C',
      value: '10000',
      validAfter: '1740672089',
      validBefore: '1740672154',
      nonce: `0x${'f3'.repeat(32)}`,
    },
  },
};

const svmPayment: PaymentPayload = {
  x402Version: 1,
  scheme: 'exact',
  network: 'solana-mainnet-beta',
  payload: { transaction: Buffer.from('not really a transaction, but base64').toString('base64') },
};

const base64Json = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64');
const withAuthorization = (changes: Record<string, unknown>) =>
  base64Json({
    ...evmPayment,
    payload: { ...evmPayment.payload, authorization: { ...(evmPayment.payload as any).authorization, ...changes } },
  });

describe('X-PAYMENT', () => {
  it('round-trips EVM and Solana payments, keeping the network name as sent', () => {
    for (const payment of [evmPayment, svmPayment]) {
      const header = encodePaymentHeader(payment);
      expect(header).toMatch(/^[A-Za-z0-9+/]+=*$/);
      expect(JSON.parse(Buffer.from(header, 'base64').toString('utf8'))).toEqual(payment);
      expect(decodePaymentHeader(header, PAYMENT_SCHEMES)).toEqual({ ok: true, value: payment });
    }
  });

  it('accepts surrounding whitespace and unpadded base64', () => {
    const header = encodePaymentHeader(evmPayment);
    expect(decodePaymentHeader(`  ${header}\t`, PAYMENT_SCHEMES)).toEqual({ ok: true, value: evmPayment });
    expect(decodePaymentHeader(header.replace(/=+$/, ''), PAYMENT_SCHEMES)).toEqual({ ok: true, value: evmPayment });
  });

  it.each([
    [undefined, 'invalid_header'],
    [42, 'invalid_header'],
    ['', 'invalid_header'],
    ['not base64 at all!', 'invalid_header'],
    ['A'.repeat(MAX_PAYMENT_HEADER_CHARS + 4), 'invalid_header'],
    [Buffer.from('{"x402Version":1').toString('base64'), 'invalid_json'],
    [Buffer.from([0xff, 0xfe, 0x00]).toString('base64'), 'invalid_json'],
    [base64Json('a string'), 'invalid_payload'],
    [base64Json([evmPayment]), 'invalid_payload'],
    [base64Json({ ...evmPayment, x402Version: 2 }), 'unsupported_x402_version'],
    [base64Json({ ...evmPayment, scheme: 'upto' }), 'unsupported_scheme'],
    [base64Json({ ...evmPayment, network: 'gnosis' }), 'unknown_network'],
    [base64Json({ ...evmPayment, network: undefined }), 'unknown_network'],
    [base64Json({ ...evmPayment, payload: svmPayment.payload }), 'invalid_payload'],
    [base64Json({ ...svmPayment, payload: evmPayment.payload }), 'invalid_payload'],
    [base64Json({ ...svmPayment, payload: { transaction: 'not base64!' } }), 'invalid_payload'],
    [base64Json({ ...evmPayment, payload: { ...evmPayment.payload, signature: 'abc' } }), 'invalid_payload'],
    [base64Json({ ...evmPayment, payload: { ...evmPayment.payload, signature: '0xabc' } }), 'invalid_payload'],
    [withAuthorization({ value: 10000 }), 'invalid_payload'],
    [withAuthorization({ value: '1.5' }), 'invalid_payload'],
    [withAuthorization({ value: '-1' }), 'invalid_payload'],
    [withAuthorization({ validBefore: '0x10' }), 'invalid_payload'],
    [withAuthorization({ nonce: `0x${'f3'.repeat(31)}` }), 'invalid_payload'],
    [withAuthorization({ from: '0x1234' }), 'invalid_payload'],
    [withAuthorization({ to: undefined }), 'invalid_payload'],
  ])('refuses garbage %# without throwing: %s', (header, reason) => {
    expect(decodePaymentHeader(header, PAYMENT_SCHEMES)).toMatchObject({
      ok: false,
      reason,
      details: expect.any(String),
    });
  });

  it('never throws on random bytes', () => {
    for (let round = 0; round < 200; round++) {
      const bytes = Buffer.from(Array.from({ length: round }, (_, index) => (index * 7919 + round * 104729) % 256));
      const decoded = decodePaymentHeader(bytes.toString('base64'), PAYMENT_SCHEMES);
      expect(decoded.ok).toBe(false);
    }
  });
});

describe('X-PAYMENT-RESPONSE', () => {
  it('round-trips a settlement and keeps only its fields', () => {
    const settlement = {
      success: true,
      transaction: `0x${'12'.repeat(32)}`,
      network: 'base-sepolia',
      payer: '0x857b06519E91e3A54538791bDbb0E22373e36b66',
    };
    expect(decodePaymentResponseHeader(encodePaymentResponseHeader(settlement))).toEqual({
      ok: true,
      value: settlement,
    });
    expect(decodePaymentResponseHeader(base64Json({ ...settlement, errorReason: null, extra: 1 }))).toEqual({
      ok: true,
      value: settlement,
    });
  });

  it('keeps an errorReason of a failed settlement', () => {
    const failed = { success: false, transaction: '', network: 'solana', errorReason: 'insufficient_funds' };
    expect(decodePaymentResponseHeader(encodePaymentResponseHeader(failed))).toEqual({ ok: true, value: failed });
  });

  it.each([
    [undefined, 'invalid_header'],
    ['%%%', 'invalid_header'],
    [Buffer.from('nope').toString('base64'), 'invalid_json'],
    [base64Json({ success: 'true', transaction: '0x', network: 'base' }), 'invalid_settlement_response'],
    [base64Json({ success: true, network: 'base' }), 'invalid_settlement_response'],
    [base64Json({ success: true, transaction: '0x' }), 'invalid_settlement_response'],
    [base64Json({ success: true, transaction: '0x', network: 'base', payer: 7 }), 'invalid_settlement_response'],
    [base64Json(null), 'invalid_settlement_response'],
  ])('refuses a malformed response %#: %s', (header, reason) => {
    expect(decodePaymentResponseHeader(header)).toMatchObject({ ok: false, reason });
  });
});
