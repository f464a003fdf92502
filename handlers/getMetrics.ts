import type { Handler } from './types';

/** The Prometheus text exposition of this instance's metrics (server/metrics.ts). */
export const getMetrics: Handler<'getMetrics'> = async (_ctx, { metricsExposition }) => {
  const { contentType, body } = await metricsExposition();
  return { status: 200, raw: body, contentType };
};
