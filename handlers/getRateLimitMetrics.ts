import type { Handler } from './types';

export const getRateLimitMetrics: Handler<'getRateLimitMetrics'> = (_ctx, { capMetrics }) =>
  Promise.resolve({
    status: 200,
    body: capMetrics(),
  });
