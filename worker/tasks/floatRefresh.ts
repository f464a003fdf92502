/**
 * Every FLOAT_REFRESH_SECONDS (and at once when a worker starts): reads our wallet's stablecoin and
 * gas on every enabled network and stores the reading (payments/tracking/float.ts), which the
 * gauges of /metrics and the floors of /relay and /proxy read. Each run queues the next one, also
 * when a chain could not be read (that network keeps its last figures and records the error).
 */
import type { Task } from 'graphile-worker';
import { queueFloatRefresh, refreshWalletFloats } from '../../payments/tracking/float';
import type { WorkerDeps } from '../deps';

export function floatRefresh(deps: WorkerDeps): Task<'float_refresh'> {
  return async () => {
    try {
      const reads = await refreshWalletFloats(deps);
      const failed = reads.filter((read) => read.kind === 'failed').length;
      if (failed > 0) deps.log.warn({ task: 'float_refresh', failed }, 'some wallet balances could not be read');
    } finally {
      // By the wall clock, as the database runs jobs: a test's clock set elsewhere never spins or stalls the job.
      await queueFloatRefresh(deps.db, deps.config.floatRefreshSeconds);
    }
  };
}
