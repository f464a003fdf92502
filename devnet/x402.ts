// x402 version 1 wire shapes as the peers exchange them (docs/architecture.md section 4). The harness has
// its own types because x402@1.2.0's schemas reject networks it does not know (skale-base).
import type { Address, Hex } from 'viem';

export const X402_VERSION = 1;

export interface PaymentRequirements {
  /** 'exact', the one scheme of these peers; a string as received, checked where it matters. */
  scheme: string;
  network: string;
  maxAmountRequired: string;
  resource: string;
  description: string;
  mimeType: string;
  payTo: string;
  maxTimeoutSeconds: number;
  asset: string;
  outputSchema?: Record<string, unknown>;
  extra?: Record<string, unknown>;
}

export interface ExactEvmPayload {
  signature: Hex;
  authorization: {
    from: Address;
    to: Address;
    value: string;
    validAfter: string;
    validBefore: string;
    nonce: Hex;
  };
}

export interface ExactSvmPayload {
  /** Base64 wire transaction, signed by the payer and not yet by the fee payer. */
  transaction: string;
}

export interface PaymentPayload<Payload = ExactEvmPayload | ExactSvmPayload> {
  x402Version: number;
  /** 'exact', as PaymentRequirements.scheme. */
  scheme: string;
  network: string;
  payload: Payload;
}

export interface PaymentRequiredBody {
  x402Version: number;
  error: string;
  accepts: PaymentRequirements[];
  payer?: string;
}

export interface VerifyResponse {
  isValid: boolean;
  invalidReason?: string;
  payer?: string;
}

export interface SettleResponse {
  success: boolean;
  errorReason?: string;
  transaction: string;
  network: string;
  payer?: string;
}

export function encodePaymentHeader(payment: PaymentPayload): string {
  return Buffer.from(JSON.stringify(payment)).toString('base64');
}

export function decodePaymentHeader(header: string): PaymentPayload {
  return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as PaymentPayload;
}

/** X-PAYMENT-RESPONSE: base64 JSON of the settlement. */
export function encodePaymentResponseHeader(settlement: SettleResponse): string {
  return Buffer.from(JSON.stringify(settlement)).toString('base64');
}

export function decodePaymentResponseHeader(header: string): SettleResponse {
  return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as SettleResponse;
}
