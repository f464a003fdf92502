/**
 * A client's payment to us in either protocol version (docs/architecture.md section 4): X-PAYMENT
 * (version 1) or PAYMENT-SIGNATURE (version 2). Both are decoded strictly; a version 2 payment is
 * then turned into the version 1 payment our verification, records and settlement work on, once
 * its `accepted` has been found among the offers of the 402 we would send now (deep equality, as
 * version 2 servers match it). From there on nothing depends on the version: the nonce, the
 * limits and the settlement are those of the version 1 payment, so one authorization sent in both
 * versions is still one payment.
 */
import { PAYMENT_SCHEMES } from '../chains/registry';
import { decodePaymentHeader, decodePaymentSignatureHeader, type PaymentHeaderFailureReason } from '../x402/headers';
import type { PaymentSignature } from '../x402/headers';
import { X402_VERSION, type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { requirementsToV2, type X402Version } from '../x402/v2';
import { fail, ok, type Result } from '../basics/result';
import { paymentIdentifierOf } from '../x402/extensions';
import { isExactPayload } from '../x402/schemes';
import type { PaymentRequirementsV2 } from '../x402/v2';

/**
 * The upto offer of our 402 a version 2 payment accepted (deep equality, as for exact), or
 * undefined when it pays in another scheme or accepted none of them.
 */
export function acceptedUptoOffer(
  decoded: DecodedClientPayment,
  uptoOffered: readonly PaymentRequirementsV2[],
): PaymentRequirementsV2 | undefined {
  if (decoded.version !== 2 || decoded.signature.accepted.scheme !== 'upto') return undefined;
  return uptoOffered.find((entry) => jsonEqual(entry, decoded.signature.accepted));
}

/** The payment header a request carried, with the version its name says. */
export interface ClientPaymentHeader {
  version: X402Version;
  value: string;
}

export type DecodedClientPayment =
  { version: 1; payment: PaymentPayload } | { version: 2; signature: PaymentSignature };

/** The header's name as clients write it, for messages. */
/** A client's payment header decoded once, on arrival: its version, and the payment or why it is malformed. */
export interface ReceivedPayment {
  version: X402Version;
  decoded: Result<DecodedClientPayment, PaymentHeaderFailureReason>;
}

export function receivedPayment(header: ClientPaymentHeader): ReceivedPayment {
  return { version: header.version, decoded: decodeClientPayment(header) };
}

export function paymentHeaderName(version: X402Version): string {
  return version === 1 ? 'X-PAYMENT' : 'PAYMENT-SIGNATURE';
}

/** Decodes the header of its version with every field checked; nothing is matched against offers yet. */
export function decodeClientPayment(
  header: ClientPaymentHeader,
): Result<DecodedClientPayment, PaymentHeaderFailureReason> {
  if (header.version === 1) {
    const decoded = decodePaymentHeader(header.value, PAYMENT_SCHEMES);
    return decoded.ok ? ok({ version: 1, payment: decoded.value }) : decoded;
  }
  const decoded = decodePaymentSignatureHeader(header.value, PAYMENT_SCHEMES);
  return decoded.ok ? ok({ version: 2, signature: decoded.value }) : decoded;
}

/** Equality of JSON values: objects by their keys whatever their order, arrays item by item. */
function jsonEqual(left: unknown, right: unknown): boolean {
  if (left === right) return true;
  if (typeof left !== 'object' || typeof right !== 'object' || left === null || right === null) return false;
  if (Array.isArray(left) !== Array.isArray(right)) return false;
  if (Array.isArray(left) && Array.isArray(right))
    return left.length === right.length && left.every((item, index) => jsonEqual(item, right[index]));
  const a = left as Record<string, unknown>;
  const b = right as Record<string, unknown>;
  const keysA = Object.keys(a).filter((key) => a[key] !== undefined);
  const keysB = Object.keys(b).filter((key) => b[key] !== undefined);
  return keysA.length === keysB.length && keysA.every((key) => Object.hasOwn(b, key) && jsonEqual(a[key], b[key]));
}

/**
 * The version 1 payment a decoded payment amounts to, and the offers it is verified against. A
 * version 1 payment is verified against all of them (by its network, as today); a version 2
 * payment only against the offer its `accepted` equals, named as we name it.
 */
export function paymentForOffers(
  decoded: DecodedClientPayment,
  offered: readonly PaymentRequirements[],
): Result<{ payment: PaymentPayload; offered: readonly PaymentRequirements[] }, 'offer_mismatch'> {
  if (decoded.version === 1) return ok({ payment: decoded.payment, offered });
  const { accepted, payload } = decoded.signature;
  const offer = offered.find((entry) => jsonEqual(requirementsToV2(entry), accepted));
  if (offer === undefined || !isExactPayload(payload, PAYMENT_SCHEMES)) {
    return fail(
      'offer_mismatch',
      `accepted is not one of the offers of this 402 (${accepted.network.slice(0, 64)}, amount ${accepted.amount.slice(0, 80)}): echo one entry of PAYMENT-REQUIRED's accepts verbatim`,
    );
  }
  return ok({
    payment: { x402Version: X402_VERSION, scheme: 'exact', network: offer.network, payload },
    offered: [offer],
  });
}

/**
 * The payment id a version 2 payment carries in its `payment-identifier` extension (a version 1
 * payment has no extensions); refused when malformed. Every other extension is ignored.
 */
export function paymentIdOf(decoded: DecodedClientPayment): Result<string | undefined, 'invalid_payment_identifier'> {
  return decoded.version === 2 ? paymentIdentifierOf(decoded.signature.extensions) : ok(undefined);
}
