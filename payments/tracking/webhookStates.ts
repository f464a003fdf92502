/**
 * The moves of a webhook record (webhooks.status). Every arrow below is in WEBHOOK_MOVES and every
 * move of WEBHOOK_MOVES is an arrow below (test/db/state-tables.test.ts); states joined by a
 * bar are reached alike.
 *
 *   async_processing -> success | refund_confirmed | success_refunded | no_refund_needed
 *   async_processing -> payment_failed | upstream_error | internal_error | rate_limited | validation_failed | refund_failed
 *
 * A record is opened in flight and ended once: a job that runs twice cannot overwrite the first
 * outcome. completeWebhook (./webhooks.ts) writes these moves; charge_proxy_payment and
 * release_proxy_payment (db/functions/) end a proxy payment's record the same way, from
 * async_processing only.
 */
import type { StoredWebhookStatus } from '../../db/schema';
import type { MoveTable } from '../basics/states';

const ENDS = [
  'success',
  'refund_confirmed',
  'success_refunded',
  'no_refund_needed',
  'payment_failed',
  'upstream_error',
  'internal_error',
  'rate_limited',
  'validation_failed',
  'refund_failed',
] as const;

export const WEBHOOK_MOVES = {
  async_processing: ENDS,
  success: [],
  refund_confirmed: [],
  success_refunded: [],
  no_refund_needed: [],
  payment_failed: [],
  upstream_error: [],
  internal_error: [],
  rate_limited: [],
  validation_failed: [],
  refund_failed: [],
} as const satisfies MoveTable<StoredWebhookStatus>;
