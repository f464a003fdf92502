import type { Handler } from './types';
import { findWebhook } from '../payments/tracking/webhooks';
import { errorReply } from './errors';

/** Suggested polling interval for records still in flight (docs/decisions.md). */
export const WEBHOOK_POLL_SECONDS = 2;

export const getWebhook: Handler<'getWebhook'> = async (ctx, { db }) => {
  const record = await findWebhook(db, ctx.params.id);
  if (!record) {
    return errorReply('not_found', `No webhook record has the id ${ctx.params.id}.`);
  }
  if (record.status === 'pending') {
    return {
      status: 202,
      body: { ...record, status: 'pending' },
      headers: { 'Retry-After': String(WEBHOOK_POLL_SECONDS) },
    };
  }
  if (record.status === 'failed') {
    return {
      status: 500,
      body: {
        ...record,
        status: 'failed',
        error: record.error ?? 'failed',
        errorType: record.errorType ?? 'internal_error',
      },
    };
  }
  return { status: 200, body: { ...record, status: record.status } };
};
