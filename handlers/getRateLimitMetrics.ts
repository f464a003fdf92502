import type { Handler } from './types';

export const getRateLimitMetrics: Handler<'getRateLimitMetrics'> = async (_ctx, { capMetrics }) => ({
  status: 200,
  body: capMetrics(),
});
