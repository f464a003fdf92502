/**
 * The bounds of each wait of a payment we receive (verification, settlement, refund), one set per
 * process (Deps.paymentBounds). Kept apart from the receiving code, importing nothing, so that Deps
 * can name it without payments/incoming/ and payments/deps.ts importing each other.
 */
export interface PaymentBounds {
  /** An authorization valid for less than this at verification is refused as expired: settlement needs the time. */
  minValiditySeconds: number;
  /** The same rule right before broadcasting, when only the submission itself is left. */
  settleMarginSeconds: number;
  facilitatorTimeoutMs: number;
  /** The longest we wait for a receipt or a confirmation after broadcasting; then the outcome is pending. */
  confirmationTimeoutMs: number;
  confirmationPollMs: number;
  /** Bounds of the compute budget a Solana client may make our fee payer pay for. */
  maxComputeUnitLimit: number;
  maxComputeUnitPriceMicroLamports: bigint;
  /** Solana RPC calls made here (kit has no timeout of its own). */
  rpcTimeoutMs: number;
}

/**
 * x402 facilitators cap the price at 5,000,000 micro-lamports per unit; with our limit that is at
 * most 0.001 SOL of priority fee per payment. Clients estimate about 6,500 units for TransferChecked.
 */
export const DEFAULT_PAYMENT_BOUNDS: PaymentBounds = {
  minValiditySeconds: 30,
  settleMarginSeconds: 6,
  facilitatorTimeoutMs: 30_000,
  confirmationTimeoutMs: 30_000,
  confirmationPollMs: 250,
  maxComputeUnitLimit: 200_000,
  maxComputeUnitPriceMicroLamports: 5_000_000n,
  rpcTimeoutMs: 10_000,
};
