/**
 * Which record of payments/idempotency.ts a paid /relay call is run under. With an Idempotency-Key:
 * the key, per paying wallet (EVM: authorization.from) or, on Solana where the payer is read only
 * from the signed transaction, per payment. Without one: the payment itself, so that a client
 * that repeats its X-PAYMENT or PAYMENT-SIGNATURE after a lost answer gets that answer instead of
 * "already used". The header's version is part of the payment's key: one authorization sent in
 * the other header is another request, refused as already used.
 */
import type { DecodedClientPayment } from '../incoming/clientPayment';
import { sha256Hex, type IdempotencyScope } from '../idempotency';
import type { ExactEvmPayload, ExactSvmPayload } from '../x402/types';

function isEvm(payload: ExactEvmPayload | ExactSvmPayload): payload is ExactEvmPayload {
  return 'authorization' in payload;
}

function payloadOf(payment: DecodedClientPayment): ExactEvmPayload | ExactSvmPayload {
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
  if (key !== undefined) {
    return isEvm(payload)
      ? { scope: `relay:${payload.authorization.from.toLowerCase()}`, key }
      : { scope: `relay-payment:${sha256Hex(payload.transaction)}`, key };
  }
  const identity = isEvm(payload) ? payload.authorization.nonce.toLowerCase() : sha256Hex(payload.transaction);
  // Hashed: the network of a version 2 payment is the client's text, of any length.
  return { scope: 'relay-nonce', key: `v${payment.version}:${sha256Hex(`${network}\n${identity}`)}` };
}
