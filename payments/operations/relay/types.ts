/**
 * What a /relay call is given and what it answers, shared by its exact path (call.ts) and its upto
 * path (uptoClient.ts), so that neither imports the other's types.
 */
import type { CallRequest, TargetResponse } from '../../basics/http/index';
import type { ReceivedPayment } from '../../incoming/clientPayment';
import type { SettleFailureReason } from '../../incoming/settle';
import type { ClaimRef } from '../../basics/idempotency';
import type { OfferRefused, TransferMethodUnsupported } from '../../outgoing/index';
import type { PriceAboveLimit } from '../../accounts/policy';
import type { PaymentRequirements, SettlementResponse } from '../../x402/types';
import type { PaymentRequirementsV2 } from '../../x402/v2';
import type { WalletBelowFloor } from '../../tracking/floorCheck';

export interface RelayCall {
  call: CallRequest;
  /** X-PAYMENT (version 1) or PAYMENT-SIGNATURE (2), decoded once on arrival; undefined on the first call. */
  payment: ReceivedPayment | undefined;
  /** Our /relay URL, the `resource` of our 402. */
  resource: string;
  /** Bound on the exchanges with the target (they share it); settlement waits have their own bounds. */
  timeoutMs: number;
  /** The idempotency record's claim the call runs under: the relay transaction carries it. */
  idempotency?: ClaimRef;
  /** The caller's `max_amount`: a dearer target is refused before any offer or payment. */
  maxAmountMicroUsdc?: bigint | undefined;
}

export type ServiceStatus = 'payment_required' | 'payment_validating' | 'processing';

export interface RelayHeaders {
  /** The client's payment to us, settled. */
  clientPayment?: string;
  /** The same settlement as a receipt (version 1 form), for a PAYMENT-RESPONSE to a version 2 payer. */
  clientSettlement?: SettlementResponse;
  /** Our payment to the target (X-PAYMENT-RESPONSE form). */
  paymentResponse?: string;
  webhookId?: string;
  refundWebhookId?: string;
  serviceStatus?: ServiceStatus;
}

export type RelayOutcome =
  | { kind: 'pass_through'; response: TargetResponse; headers: RelayHeaders }
  /** `reason`: why a payment was refused (absent when the request carried none). */
  /** `uptoAccepts`: the upto entries offered before `accepts` in PAYMENT-REQUIRED (version 2 only), for an upto target. */
  | {
      kind: 'payment_required';
      accepts: PaymentRequirements[];
      uptoAccepts?: PaymentRequirementsV2[];
      error: string;
      reason?: SettleFailureReason;
    }
  /** `reason`: set when it is the payment that is refused (malformed, or already used). */
  | { kind: 'bad_request'; details: string; reason?: SettleFailureReason }
  | PriceAboveLimit
  | TransferMethodUnsupported
  | OfferRefused
  | { kind: 'spend_limit'; details: string; spentMicroUsdc: bigint; limitMicroUsdc: bigint; requestedMicroUsdc: bigint }
  | { kind: 'bad_gateway'; message: string; headers: RelayHeaders }
  /** Our payment to the target could not be made: a 502 before anything of the client's moved (not kept under an Idempotency-Key). */
  | { kind: 'target_not_payable'; message: string }
  | { kind: 'internal_error'; details: string }
  /** Our wallet is under a floor on a network the call's money would move on: a 503 before anything moved. */
  | WalletBelowFloor;
