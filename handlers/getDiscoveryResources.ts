import type { Handler } from './types';
import { discoveredResources } from '../payments/operations/discovery/resources';
import { errorReply } from './errors';

/**
 * GET /discovery/resources: the resources this service has paid, in the Bazaar's list format, one
 * entry per resource, filtered by what the Bazaar client of @x402/extensions sends (`type`,
 * `payTo`, `scheme`, `network`, `extensions`, `limit`, `offset`) and by `q` and `max_amount`.
 */
export const getDiscoveryResources: Handler<'getDiscoveryResources'> = async (ctx, { db, clock, config }) => {
  if (config.discovery !== 'public')
    return errorReply('not_found', 'Discovery is off on this server (DISCOVERY is not public).');
  // Checked against the document's bounds by the router; numbers may still arrive as their text.
  const query = ctx.query as {
    type?: string;
    q?: string;
    max_amount?: string;
    payTo?: string;
    scheme?: string;
    network?: string;
    extensions?: string;
    limit?: number | string;
    offset?: number | string;
  };
  const limit = Number(query.limit ?? 20);
  const offset = Number(query.offset ?? 0);
  const { items, total } =
    query.type !== undefined && query.type !== 'http'
      ? { items: [], total: 0 }
      : await discoveredResources(db, {
          now: clock.now(),
          limit,
          offset,
          text: query.q,
          maxAmountMicroUsdc: query.max_amount === undefined ? undefined : BigInt(query.max_amount),
          payTo: query.payTo,
          scheme: query.scheme,
          network: query.network,
          extensions: query.extensions
            ?.split(',')
            .map((key) => key.trim())
            .filter(Boolean),
        });
  return {
    status: 200,
    body: {
      x402Version: 1 as const,
      items: items.map((item) => ({
        resource: item.resource,
        type: 'http' as const,
        x402Version: 1 as const,
        accepts: item.accepts.map((offer) => ({ ...offer, scheme: 'exact' as const })),
        lastUpdated: item.lastUpdated.toISOString(),
        ...(item.description ? { description: item.description } : {}),
        ...(item.mimeType ? { mimeType: item.mimeType } : {}),
        extensions: {
          router: {
            methods: item.methods,
            // The first of `methods` (a resource is listed only once paid, so it has one).
            method: item.methods[0] ?? '',
            paidCalls: item.paidCalls,
            successRate: item.paidCalls === 0 ? 0 : item.succeeded / item.paidCalls,
            p50LatencyMs: item.p50LatencyMs,
          },
        },
      })),
      pagination: { limit, offset, total },
    },
  };
};
