/**
 * Follows one settled transaction to finality (payments/finality.ts): final, dropped and sent
 * again, or lost. Until it is final or lost the job queues itself again (same job key). Safe to
 * repeat: it reads the watch first, and every move is a guarded update from pending.
 */
import type { Task } from 'graphile-worker';
import { enqueueFinalityWatch, followFinality, type LossObserver } from '../../payments/finality';
import type { WorkerDeps } from '../deps';

function parseWatchPayload(payload: unknown): bigint {
  const id = (payload as { watchId?: unknown } | null)?.watchId;
  if (typeof id !== 'string' || !/^[1-9][0-9]{0,18}$/.test(id)) {
    throw new Error('finality_watch: payload needs watchId as a decimal string');
  }
  return BigInt(id);
}

export function finalityWatch(deps: WorkerDeps, onPaymentLost?: LossObserver): Task<'finality_watch'> {
  return async (payload) => {
    const id = parseWatchPayload(payload);
    const next = await followFinality({ ...deps, ...(onPaymentLost ? { onPaymentLost } : {}) }, id);
    if (next) await enqueueFinalityWatch(deps.db, id, next);
  };
}
