// The pure parts of retries after a lost answer: the Idempotency-Key's bounds, the request's
// fingerprint, and the record a /relay payment runs under (payments/basics/idempotency.ts, payments/operations/relay/retries.ts).
import { describe, expect, it } from 'vitest';
import { readIdempotencyKey, requestFingerprint } from '../../payments/basics/idempotency';
import type { DecodedClientPayment } from '../../payments/incoming/clientPayment';
import { relayIdempotencyScope } from '../../payments/operations/relay/retries';

const FROM = '0xAbC0000000000000000000000000000000000001';
const NONCE = `0x${'ab'.repeat(32)}`;
const authorization = { from: FROM, to: FROM, value: '1', validAfter: '0', validBefore: '9', nonce: NONCE };

const v1 = (payload: object): DecodedClientPayment =>
  ({ version: 1, payment: { x402Version: 1, scheme: 'exact', network: 'base-sepolia', payload } }) as never;
const v2 = (payload: object): DecodedClientPayment =>
  ({ version: 2, signature: { x402Version: 2, accepted: { network: 'eip155:84532' }, payload } }) as never;

describe('Idempotency-Key', () => {
  it('is optional, one value of 1 to 255 printable ASCII characters without spaces', () => {
    expect(readIdempotencyKey(undefined)).toEqual({ ok: true, value: undefined });
    expect(readIdempotencyKey('3f1c-ok_key:1~')).toEqual({ ok: true, value: '3f1c-ok_key:1~' });
    expect(readIdempotencyKey('k'.repeat(255))).toMatchObject({ ok: true });
    for (const bad of ['', 'k'.repeat(256), 'a b', 'tab\there', 'é', ['a', 'b']])
      expect(readIdempotencyKey(bad)).toMatchObject({ ok: false, details: expect.stringContaining('Idempotency-Key') });
  });

  it('binds the method, the path with format and the body', () => {
    const base = { method: 'post', path: '/proxy', body: { api_url: 'https://a.example/x', method: 'GET' } };
    expect(requestFingerprint(base)).toBe(requestFingerprint({ ...base, method: 'POST' }));
    expect(requestFingerprint(base)).not.toBe(requestFingerprint({ ...base, path: '/proxy?format=json' }));
    expect(requestFingerprint(base)).not.toBe(
      requestFingerprint({ ...base, body: { api_url: 'https://a.example/y', method: 'GET' } }),
    );
  });
});

describe('the record of a /relay payment', () => {
  it('with a key: per paying EVM wallet, whatever the payment; on Solana per payment', () => {
    expect(relayIdempotencyScope(v1({ signature: '0x1', authorization }), 'k')).toEqual({
      scope: `relay:${FROM.toLowerCase()}`,
      key: 'k',
    });
    expect(
      relayIdempotencyScope(
        v2({ signature: '0x2', authorization: { ...authorization, nonce: `0x${'cd'.repeat(32)}` } }),
        'k',
      ),
    ).toEqual({
      scope: `relay:${FROM.toLowerCase()}`,
      key: 'k',
    });
    const solana = relayIdempotencyScope(v1({ transaction: 'AQID' }), 'k');
    expect(solana.scope).toMatch(/^relay-payment:[0-9a-f]{64}$/);
    expect(relayIdempotencyScope(v1({ transaction: 'AQIE' }), 'k').scope).not.toBe(solana.scope);
  });

  it('without a key: the payment itself, per header version', () => {
    const one = relayIdempotencyScope(v1({ signature: '0x1', authorization }), undefined);
    expect(one.scope).toBe('relay-nonce');
    // The same authorization with another signature encoding is still the same payment.
    expect(
      relayIdempotencyScope(
        v1({ signature: '0x9', authorization: { ...authorization, nonce: NONCE.toUpperCase().replace('0X', '0x') } }),
        undefined,
      ),
    ).toEqual(one);
    expect(relayIdempotencyScope(v2({ signature: '0x1', authorization }), undefined)).not.toEqual(one);
    expect(relayIdempotencyScope(v1({ transaction: 'AQID' }), undefined).key).not.toBe(one.key);
  });
});
