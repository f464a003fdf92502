/**
 * Which record of payments/idempotency.ts a paid /relay call is run under. With an Idempotency-Key:
 * the key, per paying wallet (EVM: authorization.from) or, on Solana where the payer is read only
 * from the signed transaction, per payment. Without one: the payment itself, so that a client
 * that repeats its X-PAYMENT or PAYMENT-SIGNATURE after a lost answer gets that answer instead of
 * "already used". The header's version is part of the payment's key: one authorization sent in
 * the other header is another request, refused as already used.
 */
import { PAYMENT_SCHEMES } from '../chains/registry';
import type { DecodedClientPayment } from '../incoming/clientPayment';
import { sha256Hex, type IdempotencyScope } from '../idempotency';
import type { SchemePayload } from '../x402/schemes';

function payloadOf(payment: DecodedClientPayment): SchemePayload {
  return payment.version === 1 ? payment.payment.payload : payment.signature.payload;
}

/** The payment a keyed call carried (a hash of its payload): a repeat with another one must prove it would pay. */
export function paymentIdentity(payment: DecodedClientPayment): string {
  return sha256Hex(JSON.stringify(payloadOf(payment)));
}

export function relayIdempotencyScope(payment: DecodedClientPayment, key: string | undefined): IdempotencyScope {
  const { payload, network } =
    payment.version === 1
      ? { payload: payment.payment.payload, network: payment.payment.network }
      : { payload: payment.signature.payload, network: payment.signature.accepted.network };
  // A decoded payload is of a registered scheme's shape: decoding checked it.
  const scheme = PAYMENT_SCHEMES.schemeOfPayload(payload);
  if (scheme === undefined) throw new Error(`a payment on ${network} of no registered scheme: it was not decoded`);
  const identity = scheme.replayIdentity(payload);
  if (key !== undefined) {
    return identity.payer !== undefined
      ? { scope: `relay:${identity.payer}`, key }
      : { scope: `relay-payment:${identity.payment}`, key };
  }
  // Hashed: the network of a version 2 payment is the client's text, of any length.
  return { scope: 'relay-nonce', key: `v${payment.version}:${sha256Hex(`${network}\n${identity.payment}`)}` };
}
