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

/**
 * An upto payment through Permit2 (x402 `upto`, the x402UptoPermit2Proxy), as we pay targets: the
 * permit names a maximum, the witness the recipient and the only facilitator that may settle it
 * (which settles any amount up to the maximum); decimal strings.
 */
export interface UptoPermit2Payload {
  signature: string;
  permit2Authorization: Omit<ExactPermit2Payload['permit2Authorization'], 'witness'> & {
    witness: { to: string; facilitator: string; validAfter: string };
  };
}

/** The schemes of the payments we make and take: exact, and upto (we pay upto targets). */
export type PaymentSchemeName = 'exact' | 'upto';

export interface PaymentPayload<
  Payload extends ExactEvmPayload | ExactSvmPayload | ExactPermit2Payload | UptoPermit2Payload =
    ExactEvmPayload | ExactSvmPayload,
  Scheme extends PaymentSchemeName = 'exact',
> {
  x402Version: typeof X402_VERSION;
  scheme: Scheme;
  network: string;
  payload: Payload;
}

/**
 * A payment we sign to a target: an EIP-3009 authorization, a Solana transaction, or a Permit2
 * witness transfer (exact), or an upto Permit2 transfer.
 */
export type SignedPaymentPayload =
  PaymentPayload<ExactEvmPayload | ExactSvmPayload | ExactPermit2Payload> | PaymentPayload<UptoPermit2Payload, 'upto'>;

/** X-PAYMENT-RESPONSE, and the answer of a facilitator's /settle. */
export interface SettlementResponse {
  success: boolean;
  /** Transaction hash (EVM) or signature (Solana); empty when nothing was broadcast. */
  transaction: string;
  network: string;
  payer?: string;
  errorReason?: string;
  /** What was settled, in the asset's atomic units (x402 version 2; an upto settlement names the amount used). */
  amount?: string;
  /** Scheme-specific facts (x402 version 2): batch-settlement's chargedAmount and channelState. */
  extra?: Record<string, unknown>;
}
