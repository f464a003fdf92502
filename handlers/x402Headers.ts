/**
 * The x402 headers of the operations that are paid (/relay, /llm/chat, /llm/translate), in both
 * protocol versions: which payment header a request carries, the PAYMENT-REQUIRED header beside the
 * version 1 body of our 402, and the receipt in the version the client paid in.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { ClientPaymentHeader } from '../payments/incoming/clientPayment';
import { encodePaymentResponseHeader } from '../payments/x402/headers';
import { PAYMENT_IDENTIFIER, paymentIdentifierDeclaration } from '../payments/x402/extensions';
import type { PaymentRequirements, SettlementResponse } from '../payments/x402/types';
import {
  encodeHeaderJson,
  paymentRequiredV2,
  PAYMENT_SIGNATURE_HEADER,
  PAYMENT_SIGNATURE_REQUIRED,
  settlementToV2,
  X_PAYMENT_HEADER,
  type PaymentRequirementsV2,
  type X402Version,
} from '../payments/x402/v2';

export type PaymentHeaderRead = { ok: true; payment: ClientPaymentHeader | undefined } | { ok: false; details: string };

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * The payment a request carries: X-PAYMENT (version 1) or PAYMENT-SIGNATURE (version 2), in any
 * casing. Both at once is refused: which one the client means to pay with is not ours to guess.
 */
export function clientPaymentHeader(headers: IncomingHttpHeaders): PaymentHeaderRead {
  const v1 = single(headers[X_PAYMENT_HEADER]);
  const v2 = single(headers[PAYMENT_SIGNATURE_HEADER]);
  if (v1 !== undefined && v2 !== undefined) {
    return {
      ok: false,
      details:
        'the request carries both X-PAYMENT (x402 version 1) and PAYMENT-SIGNATURE (x402 version 2): send one payment, in one of them',
    };
  }
  if (v2 !== undefined) return { ok: true, payment: { version: 2, value: v2 } };
  if (v1 !== undefined) return { ok: true, payment: { version: 1, value: v1 } };
  return { ok: true, payment: undefined };
}

/**
 * PAYMENT-REQUIRED: the offers of our 402 in version 2 form, beside the version 1 body. `refusal`
 * says why the request's payment was refused; without one (no payment was sent) the header asks for
 * the payment header of its own version, as the version 1 body asks for X-PAYMENT.
 */
export function paymentRequiredHeaders(
  accepts: readonly PaymentRequirements[],
  refusal: string | undefined,
  {
    paymentIdentifier = false,
    offeredFirst = [],
  }: { paymentIdentifier?: boolean; offeredFirst?: readonly PaymentRequirementsV2[] } = {},
): { 'PAYMENT-REQUIRED': string } {
  // Where a payment id is honoured (it means what Idempotency-Key means), the 402 declares the extension.
  const extensions = paymentIdentifier ? { [PAYMENT_IDENTIFIER]: paymentIdentifierDeclaration() } : undefined;
  return {
    'PAYMENT-REQUIRED': encodeHeaderJson(
      paymentRequiredV2(accepts, refusal ?? PAYMENT_SIGNATURE_REQUIRED, extensions, offeredFirst),
    ),
  };
}

/** The receipt of the client's payment in the version it paid in: X-Payment-Response (1) or PAYMENT-RESPONSE (2, CAIP-2 network). */
export function paymentResponseHeaders(version: X402Version, settlement: SettlementResponse): Record<string, string> {
  if (version === 1) return { 'X-Payment-Response': encodePaymentResponseHeader(settlement) };
  return { 'PAYMENT-RESPONSE': encodeHeaderJson(settlementToV2(settlement)) };
}
