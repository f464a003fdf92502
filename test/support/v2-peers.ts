/** Checks shared by the devnet files of the x402 version 2 peers (harness-v2*.test.ts), on EVM and Solana alike. */
import { decodePaymentRequiredHeader, decodePaymentSignatureHeader } from '@x402/core/http';
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types';
import { expect } from 'vitest';
import type { Peers, Target } from '../../devnet/index';

/** The settlements the v2 facilitator has made so far. */
export function v2Settles(peers: Peers) {
  return peers.facilitatorV2.calls.filter((call) => call.path === '/settle');
}

/** POSTs a version 1 payment to the v2 facilitator's /verify. */
export function verifyV1WithFacilitatorV2(peers: Peers, payment: unknown, requirements: unknown): Promise<Response> {
  return fetch(`${peers.facilitatorV2.url}/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ x402Version: 1, paymentPayload: payment, paymentRequirements: requirements }),
  });
}

/** An unpaid call to the target's paid route: 402 with an empty body, and PAYMENT-REQUIRED (version 2) offering `accept` alone. */
export async function expectV2Offer(target: Target, accept: PaymentRequirements): Promise<void> {
  const response = await fetch(target.routes.paid.url);
  expect(response.status).toBe(402);
  expect(await response.json()).toEqual({});
  const required = decodePaymentRequiredHeader(response.headers.get('payment-required')!);
  expect(required.x402Version).toBe(2);
  expect(required.resource.url).toBe(target.routes.paid.url);
  expect(required.accepts).toEqual([accept]);
}

/**
 * After `response` was paid: the target recorded one paid call, PAYMENT-SIGNATURE of version 2 (its
 * decoded payment is returned), and sent the PAYMENT-RESPONSE `response` got; the v2 facilitator made
 * one settlement more than `settlesBefore`, of version 2 on `caip2`.
 */
export function expectOneV2PaidCall(
  peers: Peers,
  target: Target,
  response: Response,
  caip2: string,
  settlesBefore: number,
): { header: string; payment: PaymentPayload } {
  const paid = target.requests.filter((request) => request.route === 'paid' && request.payment !== null);
  expect(paid).toHaveLength(1);
  const payment = decodePaymentSignatureHeader(paid[0]!.payment!);
  expect(payment.x402Version).toBe(2);
  expect(paid[0]!.paymentResponse).toBe(response.headers.get('payment-response'));
  const settles = v2Settles(peers);
  expect(settles).toHaveLength(settlesBefore + 1);
  expect(settles.at(-1)).toMatchObject({ x402Version: 2, network: caip2 });
  return { header: paid[0]!.payment!, payment };
}
