// A batch-settlement seller's 402 kept, with the choice made of it, for the next identical request
// of the same caller: the same method, URL, headers and body find it until it expires or is
// forgotten; any other request, or the other caller, does not.
import { describe, expect, it } from 'vitest';
import type { TargetRequest } from '../../payments/basics/http/index';
import {
  forgetSellerQuote,
  keepSellerQuote,
  keptSellerQuote,
  type KeptQuote,
} from '../../payments/outgoing/sellerQuotes';

const request = (over: Partial<TargetRequest> = {}): TargetRequest => ({
  url: 'http://127.0.0.1:4010/paid',
  method: 'GET',
  headers: { accept: 'application/json' },
  ...over,
});
// Kept as given: the module never reads inside it.
const quote = { required: { accepts: [] }, choice: { network: 'base-sepolia' } } as unknown as KeptQuote;
const found = (value: KeptQuote | undefined) => value && { required: value.required, choice: value.choice };

describe('kept seller quotes', () => {
  it('are found by the same request of the same caller only, until they expire', () => {
    const at = 1_000_000;
    keepSellerQuote('proxy', request(), quote, at);
    expect(found(keptSellerQuote('proxy', request(), at + 1))).toEqual(quote);
    expect(keptSellerQuote('relay', request(), at + 1)).toBeUndefined();
    expect(keptSellerQuote('proxy', request({ method: 'POST' }), at + 1)).toBeUndefined();
    expect(keptSellerQuote('proxy', request({ url: 'http://127.0.0.1:4010/paid?x=1' }), at + 1)).toBeUndefined();
    expect(keptSellerQuote('proxy', request({ headers: { accept: 'text/plain' } }), at + 1)).toBeUndefined();
    expect(keptSellerQuote('proxy', request({ body: Buffer.from('a') }), at + 1)).toBeUndefined();
    expect(keptSellerQuote('proxy', request(), at + 30_000)).toBeUndefined();
    // Expired, it is gone for good.
    expect(keptSellerQuote('proxy', request(), at + 1)).toBeUndefined();
  });

  it("are forgotten on demand, the caller's own only", () => {
    const at = 2_000_000;
    const a = request({ url: 'http://127.0.0.1:4010/a' });
    keepSellerQuote('proxy', a, quote, at);
    keepSellerQuote('relay', a, quote, at);
    forgetSellerQuote('proxy', a);
    expect(keptSellerQuote('proxy', a, at + 1)).toBeUndefined();
    expect(found(keptSellerQuote('relay', a, at + 1))).toEqual(quote);
  });

  it('are at most 1,000: the oldest goes first', () => {
    const at = 3_000_000;
    const nth = (index: number) => request({ url: `http://127.0.0.1:4010/n${index}` });
    for (let index = 0; index <= 1_000; index++) keepSellerQuote('proxy', nth(index), quote, at);
    expect(keptSellerQuote('proxy', nth(0), at + 1)).toBeUndefined();
    expect(found(keptSellerQuote('proxy', nth(1), at + 1))).toEqual(quote);
    expect(found(keptSellerQuote('proxy', nth(1_000), at + 1))).toEqual(quote);
  });
});
