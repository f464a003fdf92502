/**
 * x402 version 1 wire shapes (docs/architecture.md section 4). Our own types, not the x402 package's: that
 * package does not know skale-base and is a test peer only.
 */

export const X402_VERSION = 1;

/** One entry of a 402 body's `accepts`, as the target sent it (network name unchanged, so we can echo it). */
export interface PaymentRequirements {
  scheme: string;
  network: string;
  /** Atomic units of `asset`, a decimal digit string. */
  maxAmountRequired: string;
  resource: string;
  description: string;
  mimeType: string;
  payTo: string;
  maxTimeoutSeconds: number;
  asset: string;
  /** `{name, version}` of the EIP-712 domain on EVM; `{feePayer}` on Solana. */
  extra?: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
}

export interface PaymentRequiredBody {
  x402Version: typeof X402_VERSION;
  error?: string;
  accepts: PaymentRequirements[];
}

/** EIP-3009 TransferWithAuthorization as it travels: decimal strings, 32-byte hex nonce. */
export interface EvmAuthorization {
  from: string;
  to: string;
  value: string;
  validAfter: string;
  validBefore: string;
  nonce: string;
}

export interface ExactEvmPayload {
  signature: string;
  authorization: EvmAuthorization;
}

export interface ExactSvmPayload {
  /** Base64 wire transaction, signed by the payer, not yet by the fee payer. */
  transaction: string;
}

/** A Permit2 witness transfer (exact with `assetTransferMethod: "permit2"`), as we pay targets; decimal strings. */
export interface ExactPermit2Payload {
  signature: string;
  permit2Authorization: {
    from: string;
    permitted: { token: string; amount: string };
    spender: string;
    nonce: string;
    deadline: string;
    witness: { to: string; validAfter: string };
  };
}

export interface PaymentPayload<
  Payload extends ExactEvmPayload | ExactSvmPayload | ExactPermit2Payload = ExactEvmPayload | ExactSvmPayload,
> {
  x402Version: typeof X402_VERSION;
  scheme: 'exact';
  network: string;
  payload: Payload;
}

/** A payment we sign to a target: an EIP-3009 authorization, a Solana transaction, or a Permit2 witness transfer. */
export type SignedPaymentPayload = PaymentPayload<ExactEvmPayload | ExactSvmPayload | ExactPermit2Payload>;

/** X-PAYMENT-RESPONSE, and the answer of a facilitator's /settle. */
export interface SettlementResponse {
  success: boolean;
  /** Transaction hash (EVM) or signature (Solana); empty when nothing was broadcast. */
  transaction: string;
  network: string;
  payer?: string;
  errorReason?: string;
}
