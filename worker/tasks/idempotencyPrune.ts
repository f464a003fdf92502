/**
 * Every hour: deletes the kept answers of Idempotency-Keys and repeated payments past their 24
 * hours (payments/basics/idempotency.ts). An expired record already counts as absent; this only frees the
 * space. Safe to repeat: it deletes by expiry, in bounded batches.
 */
import type { Task } from 'graphile-worker';
import { pruneIdempotencyRecords } from '../../payments/basics/idempotency';
import type { WorkerDeps } from '../deps';

const BATCH = 10_000;

export function idempotencyPrune(deps: WorkerDeps): Task<'idempotency_prune'> {
  return async () => {
    let pruned = 0;
    for (;;) {
      const deleted = await pruneIdempotencyRecords(deps.db, BATCH);
      pruned += deleted;
      if (deleted < BATCH) break;
    }
    if (pruned > 0) deps.log.info({ task: 'idempotency_prune', pruned }, 'expired idempotency records pruned');
  };
}
