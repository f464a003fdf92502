/**
 * A client's `upto` payment to us on an EVM network, as @x402/evm 2.27's upto client writes it: a
 * Permit2 PermitWitnessTransferFrom for a maximum, whose spender is x402UptoPermit2Proxy and whose
 * witness names the recipient, the facilitator allowed to settle it, and validAfter. Decimal
 * strings on the wire; read here field by field (the payload is untrusted) into the numbers and
 * addresses the verification and the settlement use. Also what names such a payment for the
 * replay guard: the payer and its Permit2 nonce (Permit2's nonces are the payer's, for any token).
 */
import { getAddress, type Address, type Hex } from 'viem';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../../../basics/networkTable';
import { fail, ok, type Result } from '../../../basics/result';
import type { PaymentHeaderFailureReason } from '../../../x402/headers';
import { isPlainObject } from '../../../x402/parse';
import type { UptoPermit2Payload } from '../../../x402/types';
import { X402_VERSION_2, type PaymentRequirementsV2, type ResourceInfo } from '../../../x402/v2';
import type { IdempotencyKey } from '../../types';

export const UPTO_SCHEME = 'upto';
export const UPTO_PERMIT2_PROXY_ADDRESS: Address = '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002';

export type { UptoPermit2Payload };

/** A PAYMENT-SIGNATURE (version 2) paying an upto offer, as decoded and checked. */
export interface UptoPaymentSignature {
  x402Version: typeof X402_VERSION_2;
  resource?: ResourceInfo;
  accepted: PaymentRequirementsV2;
  payload: UptoPermit2Payload;
  extensions?: Record<string, unknown>;
}

/** The permit as numbers and checksummed addresses. */
export interface UptoPermit {
  from: Address;
  token: Address;
  /** The maximum the payer signed, in the token's atomic units. */
  maximum: bigint;
  spender: Address;
  nonce: bigint;
  /** The last second at which Permit2 accepts the permit. */
  deadline: bigint;
  to: Address;
  facilitator: Address;
  validAfter: bigint;
  signature: Hex;
}

const DIGITS = /^(0|[1-9][0-9]{0,77})$/;
const EVM_ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const HEX_BYTES = /^0x([0-9a-fA-F]{2})+$/;
const MAX_UINT256 = (1n << 256n) - 1n;
/** A plain ECDSA signature is 65 bytes; a contract wallet's (ERC-1271) is longer, but bounded here. */
const MAX_SIGNATURE_BYTES = 2048;
const MAX_FIELD_CHARS = 2048;

function isUint256(value: unknown): value is string {
  return typeof value === 'string' && DIGITS.test(value) && BigInt(value) <= MAX_UINT256;
}

function isAddressText(value: unknown): value is string {
  return typeof value === 'string' && EVM_ADDRESS.test(value);
}

/**
 * The payload of an upto payment checked field by field: a hex signature (at most 2 KiB) and a
 * permit2Authorization whose addresses are 20 bytes of hex and whose numbers are uint256 decimal
 * strings. Only these fields are kept.
 */
export function checkUptoPayload(payload: unknown): Result<UptoPermit2Payload, 'invalid_payload'> {
  if (!isPlainObject(payload)) return fail('invalid_payload', 'the upto payload is not a JSON object');
  const { signature, permit2Authorization: authorization } = payload;
  if (typeof signature !== 'string' || !HEX_BYTES.test(signature) || signature.length > 2 + 2 * MAX_SIGNATURE_BYTES)
    return fail('invalid_payload', 'signature is not hex bytes');
  if (!isPlainObject(authorization)) return fail('invalid_payload', 'permit2Authorization is not a JSON object');
  const { permitted, witness } = authorization;
  if (!isPlainObject(permitted)) return fail('invalid_payload', 'permit2Authorization.permitted is not a JSON object');
  if (!isPlainObject(witness)) return fail('invalid_payload', 'permit2Authorization.witness is not a JSON object');
  const addresses = {
    from: authorization.from,
    spender: authorization.spender,
    'permitted.token': permitted.token,
    'witness.to': witness.to,
    'witness.facilitator': witness.facilitator,
  };
  for (const [field, value] of Object.entries(addresses))
    if (!isAddressText(value)) return fail('invalid_payload', `permit2Authorization.${field} is not an address`);
  const numbers = {
    'permitted.amount': permitted.amount,
    nonce: authorization.nonce,
    deadline: authorization.deadline,
    'witness.validAfter': witness.validAfter,
  };
  for (const [field, value] of Object.entries(numbers))
    if (!isUint256(value))
      return fail('invalid_payload', `permit2Authorization.${field} is not a uint256 decimal string`);
  return ok({
    signature,
    permit2Authorization: {
      from: authorization.from as string,
      permitted: { token: permitted.token as string, amount: permitted.amount as string },
      spender: authorization.spender as string,
      nonce: authorization.nonce as string,
      deadline: authorization.deadline as string,
      witness: {
        to: witness.to as string,
        facilitator: witness.facilitator as string,
        validAfter: witness.validAfter as string,
      },
    },
  });
}

/**
 * A decoded PAYMENT-SIGNATURE (the JSON inside the base64) paying with upto, checked field by
 * field: x402Version 2, `accepted` a complete upto entry on a known EVM network (CAIP-2 id or our
 * name), and the payload as checkUptoPayload reads it. Whether `accepted` is one of our offers is
 * verifyUptoPayment's question.
 */
export function checkUptoPaymentSignature(
  value: unknown,
): Result<UptoPaymentSignature, Exclude<PaymentHeaderFailureReason, 'invalid_header' | 'invalid_json'>> {
  if (!isPlainObject(value)) return fail('invalid_payload', 'payment is not a JSON object');
  if (value.x402Version !== X402_VERSION_2) return fail('unsupported_x402_version', 'an upto payment is x402Version 2');
  const { accepted } = value;
  if (!isPlainObject(accepted)) return fail('invalid_payload', 'accepted is not a JSON object');
  if (accepted.scheme !== UPTO_SCHEME) return fail('unsupported_scheme', 'accepted.scheme is not upto');
  if (typeof accepted.network !== 'string') return fail('unknown_network', 'accepted.network is missing');
  const network = canonicalNetwork(accepted.network);
  if (network === undefined || NETWORK_TABLE[network].chainType !== 'evm')
    return fail('unknown_network', `"${accepted.network.slice(0, 64)}" is not an EVM network we know`);
  for (const field of ['asset', 'payTo'] as const)
    if (!isAddressText(accepted[field])) return fail('invalid_payload', `accepted.${field} is not an address`);
  if (typeof accepted.amount !== 'string' || !DIGITS.test(accepted.amount))
    return fail('invalid_payload', 'accepted.amount is not a decimal integer string');
  const timeout = accepted.maxTimeoutSeconds;
  if (typeof timeout !== 'number' || !Number.isSafeInteger(timeout) || timeout <= 0)
    return fail('invalid_payload', 'accepted.maxTimeoutSeconds is not a positive integer');
  if (!isPlainObject(accepted.extra)) return fail('invalid_payload', 'accepted.extra is not a JSON object');
  const { resource, extensions } = value;
  if (
    resource !== undefined &&
    (!isPlainObject(resource) || typeof resource.url !== 'string' || resource.url.length > MAX_FIELD_CHARS)
  )
    return fail('invalid_payload', 'resource is not {url, ...}');
  if (extensions !== undefined && extensions !== null && !isPlainObject(extensions))
    return fail('invalid_payload', 'extensions is not a JSON object');
  const payload = checkUptoPayload(value.payload);
  if (!payload.ok) return payload;
  const signature: UptoPaymentSignature = {
    x402Version: X402_VERSION_2,
    accepted: accepted as PaymentRequirementsV2,
    payload: payload.value,
  };
  if (isPlainObject(resource)) signature.resource = resource as unknown as ResourceInfo;
  if (isPlainObject(extensions)) signature.extensions = extensions;
  return ok(signature);
}

/** The permit of a checked payload as numbers and checksummed addresses. */
export function uptoPermitOf(payload: UptoPermit2Payload): UptoPermit {
  const { permit2Authorization: authorization } = payload;
  return {
    from: getAddress(authorization.from),
    token: getAddress(authorization.permitted.token),
    maximum: BigInt(authorization.permitted.amount),
    spender: getAddress(authorization.spender),
    nonce: BigInt(authorization.nonce),
    deadline: BigInt(authorization.deadline),
    to: getAddress(authorization.witness.to),
    facilitator: getAddress(authorization.witness.facilitator),
    validAfter: BigInt(authorization.witness.validAfter),
    signature: payload.signature as Hex,
  };
}

/** A Permit2 nonce (uint256) as 32 bytes of hex, as Permit2's nonce reads take it. */
export function permit2NonceHex(nonce: bigint): Hex {
  return `0x${nonce.toString(16).padStart(64, '0')}`;
}

/**
 * What names an upto payment for replay and idempotency, in the form a scheme's replayIdentity
 * answers: the payer (lowercase) and the permit, `permit2:<payer>:<nonce as 32 bytes of hex>`.
 * Permit2 spends each nonce of a payer once, whatever the token, so the pair is the payment; the
 * prefix keeps it apart from an EIP-3009 nonce in the same unique index.
 */
export function uptoReplayIdentity(payload: UptoPermit2Payload): { payer: string; payment: string } {
  const payer = payload.permit2Authorization.from.toLowerCase();
  return { payer, payment: `permit2:${payer}:${permit2NonceHex(BigInt(payload.permit2Authorization.nonce))}` };
}

/** The replay guard of an upto payment on `network`: unique per (network, asset, nonceKey) in relay_transactions. */
export function uptoIdempotencyKey(network: NetworkName, asset: Address, payload: UptoPermit2Payload): IdempotencyKey {
  return { network, asset, nonceKey: uptoReplayIdentity(payload).payment };
}
