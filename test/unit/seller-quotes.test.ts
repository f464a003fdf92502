// A batch-settlement seller's 402 kept for the next identical request: the same method, URL,
// headers and body find it until it expires or is forgotten; any other request does not.
import { describe, expect, it } from 'vitest';
import type { TargetRequest, TargetResponse } from '../../payments/basics/http/index';
import { forgetSellerQuote, keepSellerQuote, keptSellerQuote } from '../../payments/outgoing/sellerQuotes';

const request = (over: Partial<TargetRequest> = {}): TargetRequest => ({
  url: 'http://127.0.0.1:4010/paid',
  method: 'GET',
  headers: { accept: 'application/json' },
  ...over,
});
const quote: TargetResponse = {
  status: 402,
  headers: { 'payment-required': 'e30=' },
  body: Buffer.from('{}'),
  url: '',
};

describe('kept seller quotes', () => {
  it('are found by the same request only, until they expire', () => {
    const at = 1_000_000;
    keepSellerQuote(request(), quote, at);
    expect(keptSellerQuote(request(), at + 1)).toBe(quote);
    expect(keptSellerQuote(request({ method: 'POST' }), at + 1)).toBeUndefined();
    expect(keptSellerQuote(request({ url: 'http://127.0.0.1:4010/paid?x=1' }), at + 1)).toBeUndefined();
    expect(keptSellerQuote(request({ headers: { accept: 'text/plain' } }), at + 1)).toBeUndefined();
    expect(keptSellerQuote(request({ body: Buffer.from('a') }), at + 1)).toBeUndefined();
    expect(keptSellerQuote(request(), at + 30_000)).toBeUndefined();
    // Expired, it is gone for good.
    expect(keptSellerQuote(request(), at + 1)).toBeUndefined();
  });

  it('are forgotten on demand, and only a 402 is kept', () => {
    const at = 2_000_000;
    keepSellerQuote(request({ url: 'http://127.0.0.1:4010/a' }), quote, at);
    forgetSellerQuote(request({ url: 'http://127.0.0.1:4010/a' }));
    expect(keptSellerQuote(request({ url: 'http://127.0.0.1:4010/a' }), at + 1)).toBeUndefined();
    keepSellerQuote(request({ url: 'http://127.0.0.1:4010/b' }), { ...quote, status: 200 }, at);
    expect(keptSellerQuote(request({ url: 'http://127.0.0.1:4010/b' }), at + 1)).toBeUndefined();
  });

  it('are at most 1,000: the oldest goes first', () => {
    const at = 3_000_000;
    const nth = (index: number) => request({ url: `http://127.0.0.1:4010/n${index}` });
    for (let index = 0; index <= 1_000; index++) keepSellerQuote(nth(index), quote, at);
    expect(keptSellerQuote(nth(0), at + 1)).toBeUndefined();
    expect(keptSellerQuote(nth(1), at + 1)).toBe(quote);
    expect(keptSellerQuote(nth(1_000), at + 1)).toBe(quote);
  });
});
