import type { components } from '../codegen/api';
import type { Handler } from './types';
import { errorReply, requireApiKey } from './errors';
import {
  explorerUrl,
  listActivity,
  PAGE_LIMIT_DEFAULT,
  targetOriginAndPath,
  type Activity,
} from '../payments/accounts/usage';
import type { NetworkSettings } from '../payments/basics/config';
import { fail, ok, type Result } from '../payments/basics/result';

type PaymentItem = components['schemas']['PaymentItem'];

/**
 * The document's pattern of `from` and `to` (a date-time whose seconds are 00 to 59): a leap
 * second (23:59:60) is a valid RFC 3339 time, but no clock here has one, nor does any row.
 */
export const NO_LEAP_SECOND = /^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-5][0-9]/;

/** A date-time parameter as an instant; undefined when absent, a refusal when it names none. */
function instantOf(name: string, text: string | undefined): Result<Date | undefined, 'instant_invalid'> {
  if (text === undefined) return ok(undefined);
  const instant = new Date(text);
  if (!Number.isNaN(instant.getTime()) && NO_LEAP_SECOND.test(text)) return ok(instant);
  return fail(
    'instant_invalid',
    `${name} (${text}) is not an instant this service can read: give a date, a time with seconds from 00 to 59, and Z or an offset such as +02:00.`,
  );
}

export const getPayments: Handler<'getPayments'> = async (ctx, { db, config }) => {
  const key = requireApiKey(ctx);
  const { query } = ctx;
  const from = instantOf('from', query.from);
  if (!from.ok) return errorReply('validation_failed', from.details);
  const to = instantOf('to', query.to);
  if (!to.ok) return errorReply('validation_failed', to.details);
  const page = await listActivity(
    db,
    key.organisationId,
    {
      keyPrefix: query.key,
      host: query.host,
      status: query.status,
      kind: query.kind,
      from: from.value,
      to: to.value,
    },
    { limit: query.limit ?? PAGE_LIMIT_DEFAULT, cursor: query.cursor },
  );
  if (!page.ok) return errorReply('validation_failed', page.details);
  return {
    status: 200,
    body: {
      items: page.value.items.map((item) => paymentItem(item, config.networks)),
      next_cursor: page.value.nextCursor,
    },
  };
};

function paymentItem(item: Activity, networks: NetworkSettings[]): PaymentItem {
  const paid = item.amountMicroUsdc;
  return {
    id: item.id,
    kind: item.kind,
    status: item.status,
    created_at: item.createdAt,
    settled_at: item.settledAt?.toISOString() ?? null,
    key_prefix: item.keyPrefix,
    target: item.targetUrl === null ? null : targetOriginAndPath(item.targetUrl),
    network: item.network,
    amount_micro_usdc: paid === null ? null : paid.toString(),
    credits: Number(item.credits),
    fee_micro_usdc: paid === null ? null : (item.credits * 1000n - paid).toString(),
    tx_hash: item.txHash,
    explorer_url: explorerUrl(item.network, item.txHash, networks),
    webhook_id: item.webhookId,
  };
}
