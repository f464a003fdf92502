// A refused payment is an answer with a snake_case reason, not an error: checks throw this and the
// facilitator turns it into {isValid: false, invalidReason} or {success: false, errorReason}.
import { X402_VERSION, type PaymentPayload, type PaymentRequirements } from '../x402.js';

export class InvalidPayment extends Error {
  constructor(
    readonly reason: string,
    readonly payer?: string,
  ) {
    super(reason);
  }
}

/** What every exact payment must satisfy before its scheme-specific checks. */
export function checkVersionSchemeAndNetwork(payment: PaymentPayload, requirements: PaymentRequirements): void {
  if (payment.x402Version !== X402_VERSION) throw new InvalidPayment('invalid_x402_version');
  if (payment.scheme !== 'exact' || requirements.scheme !== 'exact') throw new InvalidPayment('unsupported_scheme');
  if (payment.network !== requirements.network) throw new InvalidPayment('invalid_network');
}
