import type { Handler } from './types';

/** Liveness: the process answers and its event loop is not stalled (server/probes.ts). */
export const getHealthLive: Handler<'getHealthLive'> = (ctx, { probes }) => {
  const report = probes.live();
  if (report.status !== 'ok') {
    ctx.log.warn({ eventLoopDelayMs: report.eventLoopDelayMs }, 'liveness: the event loop was stalled');
    return Promise.resolve({ status: 503, body: report });
  }
  return Promise.resolve({ status: 200, body: report });
};
