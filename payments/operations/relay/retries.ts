/**
 * Which record of payments/basics/idempotency.ts a paid /relay call is run under. With an Idempotency-Key:
 * the key, per paying wallet (EVM: authorization.from) or, on Solana where the payer is read only
 * from the signed transaction, per payment. Without one: the payment itself, so that a client
 * that repeats its X-PAYMENT or PAYMENT-SIGNATURE after a lost answer gets that answer instead of
 * "already used". The header's version is part of the payment's key: one authorization sent in
 * the other header is another request, refused as already used.
 */
import { PAYMENT_SCHEMES } from '../../chains/registry';
import type { DecodedClientPayment } from '../../incoming/clientPayment';
import { sha256Hex, type IdempotencyScope } from '../../basics/idempotency';
import type { SchemePayload } from '../../x402/schemes';

function payloadOf(payment: DecodedClientPayment): SchemePayload {
  return payment.version === 1 ? payment.payment.payload : payment.signature.payload;
}

/** The payment a keyed call carried (a hash of its payload): a repeat with another one must prove it would pay. */
export function paymentIdentity(payment: DecodedClientPayment): string {
  return sha256Hex(JSON.stringify(payloadOf(payment)));
}

function identityOf(payment: DecodedClientPayment) {
  const { payload, network } =
    payment.version === 1
      ? { payload: payment.payment.payload, network: payment.payment.network }
      : { payload: payment.signature.payload, network: payment.signature.accepted.network };
  // A decoded payload is of a registered scheme's shape: decoding checked it.
  const scheme = PAYMENT_SCHEMES.schemeOfPayload(payload);
  if (scheme === undefined) throw new Error(`a payment on ${network} of no registered scheme: it was not decoded`);
  return { network, identity: scheme.replayIdentity(payload) };
}

/**
 * The record of a keyed paid call of `operation` (/relay, or the paid chat): the key per paying
 * wallet (EVM), or per payment where the payer is read only from the signed transaction (Solana).
 */
export function keyedIdempotencyScope(
  operation: 'relay' | 'chat',
  payment: DecodedClientPayment,
  key: string,
): IdempotencyScope {
  const { identity } = identityOf(payment);
  return identity.payer !== undefined
    ? { scope: `${operation}:${identity.payer}`, key }
    : { scope: `${operation}-payment:${identity.payment}`, key };
}

export function relayIdempotencyScope(payment: DecodedClientPayment, key: string | undefined): IdempotencyScope {
  if (key !== undefined) return keyedIdempotencyScope('relay', payment, key);
  const { network, identity } = identityOf(payment);
  // Hashed: the network of a version 2 payment is the client's text, of any length.
  return { scope: 'relay-nonce', key: `v${payment.version}:${sha256Hex(`${network}\n${identity.payment}`)}` };
}
