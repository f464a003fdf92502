// The outcome of a paid call as read from its handler's reply (server/paidCalls.ts), for the
// metric prs_paid_calls_total{mode, result}.
import { describe, expect, it } from 'vitest';
import { paidCallOutcome } from '../../server/paidCalls';

const receipt = (success: boolean) =>
  Buffer.from(JSON.stringify({ success, transaction: '0x01', network: 'base-sepolia', payer: '0x02' })).toString(
    'base64',
  );
const raw = (status: number, headers: Record<string, string> = {}) => ({
  status,
  raw: 'answer',
  contentType: 'text/plain',
  headers,
});
const json = (status: number, body: object, headers: Record<string, string> = {}) =>
  ({ status, body, headers }) as never;
const paying = { 'x-payment': 'eyJ9' };

describe('paid-call outcomes', () => {
  it('proxy: paid, pending, refunded from our receipt; failed when the target asked and nothing was paid', () => {
    expect(paidCallOutcome('postProxy', {}, raw(200, { 'X-Payment-Response': receipt(true) }))).toEqual({
      mode: 'proxy',
      result: 'paid',
    });
    expect(
      paidCallOutcome('postProxy', {}, raw(200, { 'X-Payment-Response': receipt(false), 'X-Service-Webhook': 'w' })),
    ).toEqual({ mode: 'proxy', result: 'pending' });
    expect(paidCallOutcome('postProxy', {}, raw(404, { 'X-Payment-Response': receipt(false) }))).toEqual({
      mode: 'proxy',
      result: 'refunded',
    });
    expect(
      paidCallOutcome('postProxy', {}, json(502, { code: 'upstream_error', webhook_id: 'w', upstreamStatus: 402 })),
    ).toEqual({ mode: 'proxy', result: 'pending' });
    expect(paidCallOutcome('postProxy', {}, json(402, { code: 'insufficient_credits' }))).toEqual({
      mode: 'proxy',
      result: 'failed',
    });
    expect(paidCallOutcome('postProxy', {}, json(502, { code: 'upstream_error', upstreamStatus: 402 }))).toEqual({
      mode: 'proxy',
      result: 'failed',
    });
    // No payment involved: a free target, a refused request, an unreachable target.
    expect(paidCallOutcome('postProxy', {}, raw(200))).toBeUndefined();
    expect(paidCallOutcome('postProxy', {}, json(400, { code: 'validation_failed' }))).toBeUndefined();
    expect(paidCallOutcome('postProxy', {}, json(502, { code: 'target_unreachable' }))).toBeUndefined();
    // A replayed answer (Idempotency-Key) ran no call: counted once, when it ran.
    expect(
      paidCallOutcome(
        'postProxy',
        {},
        raw(200, { 'X-Payment-Response': receipt(true), 'Idempotent-Replayed': 'true' }),
      ),
    ).toBeUndefined();
  });

  it('relay: only with a payment; refunded, pending, paid or failed', () => {
    expect(paidCallOutcome('postRelay', {}, json(402, { code: 'payment_required' }))).toBeUndefined();
    expect(
      paidCallOutcome(
        'postRelay',
        paying,
        raw(200, { 'X-Client-Payment': '0x1', 'X-Payment-Response': receipt(true) }),
      ),
    ).toEqual({ mode: 'relay', result: 'paid' });
    expect(
      paidCallOutcome('postRelay', paying, raw(200, { 'X-Refund-Webhook-Id': 'w', 'X-Service-Webhook': 'w' })),
    ).toEqual({ mode: 'relay', result: 'refunded' });
    expect(paidCallOutcome('postRelay', paying, json(502, {}, { 'X-Service-Status': 'payment_validating' }))).toEqual({
      mode: 'relay',
      result: 'pending',
    });
    expect(paidCallOutcome('postRelay', { 'payment-signature': 'x' }, json(402, { code: 'payment_invalid' }))).toEqual({
      mode: 'relay',
      result: 'failed',
    });
  });

  it('chat: paid on 200, failed otherwise, nothing without a payment; other operations are no paid calls', () => {
    expect(paidCallOutcome('postLlmChat', paying, json(200, { response: 'hi' }))).toEqual({
      mode: 'chat',
      result: 'paid',
    });
    expect(paidCallOutcome('postLlmTranslate', paying, json(500, { code: 'llm_failed' }))).toEqual({
      mode: 'chat',
      result: 'failed',
    });
    expect(paidCallOutcome('postLlmChat', {}, json(402, { code: 'payment_required' }))).toBeUndefined();
    expect(paidCallOutcome('getConfig', paying, json(200, {}))).toBeUndefined();
  });
});
