import type { components } from '../codegen/api';
import type { Handler } from './types';
import { errorReply, requireApiKey } from './errors';
import { explorerUrl, listActivity, PAGE_LIMIT_DEFAULT, targetOriginAndPath, type Activity } from '../payments/usage';
import type { NetworkSettings } from '../payments/config';

type PaymentItem = components['schemas']['PaymentItem'];

export const getPayments: Handler<'getPayments'> = async (ctx, { db, config }) => {
  const key = requireApiKey(ctx);
  const { query } = ctx;
  const page = await listActivity(
    db,
    key.organisationId,
    {
      keyPrefix: query.key,
      host: query.host,
      status: query.status,
      kind: query.kind,
      from: query.from === undefined ? undefined : new Date(query.from),
      to: query.to === undefined ? undefined : new Date(query.to),
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
