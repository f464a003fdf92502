import type { Handler } from './types';

/** Readiness: the database, the worker where this process runs one, and every enabled chain's RPC (server/probes.ts). */
export const getHealthReady: Handler<'getHealthReady'> = async (ctx, { probes }) => {
  const report = await probes.ready();
  if (report.status !== 'ready') {
    ctx.log.warn({ checks: report.checks, failed: report.failed }, 'readiness check failed');
    return { status: 503, body: report };
  }
  return { status: 200, body: report };
};
