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
      const below = reads.filter((read) => read.kind === 'failed').length;
      if (below > 0) deps.log.warn({ task: 'float_refresh', failed: below }, 'some wallet balances could not be read');
    } finally {
      await queueFloatRefresh(deps.db, deps.config.floatRefreshSeconds, deps.clock.now().getTime());
    }
  };
}
