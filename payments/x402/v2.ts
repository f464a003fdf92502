/**
 * x402 version 2 beside version 1 (docs/architecture.md section 4): the wire types are @x402/core's,
 * the conversions between the two forms are ours. Inside, the money code works on the version 1
 * shape (`PaymentRequirements` with `maxAmountRequired` and the resource in each entry); a version
 * 2 entry is converted on the way in and kept verbatim where it must be echoed (`accepted`).
 *
 * The package's header helpers decode but do not check fields; every value read from the wire goes
 * through our own strict checks (parse.ts, headers.ts) after decoding.
 */
import type {
  PaymentPayload as PaymentPayloadV2,
  PaymentRequired as PaymentRequiredV2,
  PaymentRequirements as PaymentRequirementsV2,
  ResourceInfo,
  SettleResponse as SettlementResponseV2,
} from '@x402/core/types';
import { caip2Of, canonicalNetwork } from '../basics/networkTable';
import type { PaymentRequirements, SettlementResponse } from './types';

export type { PaymentPayloadV2, PaymentRequiredV2, PaymentRequirementsV2, ResourceInfo, SettlementResponseV2 };

export const X402_VERSION_2 = 2;

/** Which protocol version a peer spoke: the one we answer it in. */
export type X402Version = 1 | 2;

/** Header names, lower case as node gives them. */
export const PAYMENT_REQUIRED_HEADER = 'payment-required';
export const PAYMENT_SIGNATURE_HEADER = 'payment-signature';
export const PAYMENT_RESPONSE_HEADER = 'payment-response';
export const X_PAYMENT_HEADER = 'x-payment';
export const X_PAYMENT_RESPONSE_HEADER = 'x-payment-response';

/** The `error` of our PAYMENT-REQUIRED when the request carried no payment: the header of version 2, as the version 1 body names X-PAYMENT. */
export const PAYMENT_SIGNATURE_REQUIRED = 'PAYMENT-SIGNATURE header is required';

/** Every x402 header a target may send us; none of them reaches our own client (our client pays us, not the target). */
export const TARGET_X402_RESPONSE_HEADERS = [
  PAYMENT_REQUIRED_HEADER,
  PAYMENT_RESPONSE_HEADER,
  X_PAYMENT_RESPONSE_HEADER,
] as const;

/** The network as version 2 writes it (CAIP-2); a name we do not know is left as it is. */
function caip2Name(network: string): string {
  const known = canonicalNetwork(network);
  return known === undefined ? network : caip2Of(known);
}

/** One of our version 1 entries as a version 2 entry: CAIP-2 network, `amount`, no resource fields. */
export function requirementsToV2(requirements: PaymentRequirements): PaymentRequirementsV2 {
  return {
    scheme: requirements.scheme,
    network: caip2Name(requirements.network) as PaymentRequirementsV2['network'],
    amount: requirements.maxAmountRequired,
    asset: requirements.asset,
    payTo: requirements.payTo,
    maxTimeoutSeconds: requirements.maxTimeoutSeconds,
    extra: requirements.extra ?? {},
  };
}

/** The resource a version 1 entry describes, as version 2 carries it once for all entries. */
export function resourceOf(requirements: PaymentRequirements): ResourceInfo {
  return { url: requirements.resource, description: requirements.description, mimeType: requirements.mimeType };
}

/** A version 2 entry read from a peer, in our version 1 shape; the network keeps the peer's spelling. */
export function requirementsFromV2(entry: PaymentRequirementsV2, resource: ResourceInfo): PaymentRequirements {
  const requirements: PaymentRequirements = {
    scheme: entry.scheme,
    network: entry.network,
    maxAmountRequired: entry.amount,
    resource: resource.url,
    description: resource.description ?? '',
    mimeType: resource.mimeType ?? '',
    payTo: entry.payTo,
    maxTimeoutSeconds: entry.maxTimeoutSeconds,
    asset: entry.asset,
  };
  if (Object.keys(entry.extra).length > 0) requirements.extra = entry.extra;
  return requirements;
}

/**
 * Our 402's offers in version 2 form, for the PAYMENT-REQUIRED header beside the version 1 body,
 * with the extensions the operation honours (payments/x402/extensions.ts), if any.
 */
export function paymentRequiredV2(
  accepts: readonly PaymentRequirements[],
  error: string,
  extensions?: Record<string, unknown>,
  offeredFirst: readonly PaymentRequirementsV2[] = [],
): PaymentRequiredV2 {
  const first = accepts[0];
  return {
    x402Version: X402_VERSION_2,
    error,
    resource: first === undefined ? { url: '' } : resourceOf(first),
    // Entries only version 2 has (upto) come first: a client that speaks them picks them.
    accepts: [...offeredFirst, ...accepts.map(requirementsToV2)],
    ...(extensions === undefined ? {} : { extensions }),
  };
}

/** A settlement report in version 2 form: the network as CAIP-2. */
export function settlementToV2(settlement: SettlementResponse): SettlementResponseV2 {
  const answer: SettlementResponseV2 = {
    success: settlement.success,
    transaction: settlement.transaction,
    network: caip2Name(settlement.network) as SettlementResponseV2['network'],
  };
  if (settlement.payer !== undefined) answer.payer = settlement.payer;
  if (settlement.errorReason !== undefined) answer.errorReason = settlement.errorReason;
  if (settlement.amount !== undefined) answer.amount = settlement.amount;
  if (settlement.extra !== undefined) answer.extra = settlement.extra;
  return answer;
}

/** Base64 of JSON, as every x402 header is written. */
export function encodeHeaderJson(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
}
