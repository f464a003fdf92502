/**
 * What the relay's two jobs share: the payload (ids only), reading the row through a step of
 * payments/operations/relay/finish.ts, and queueing the job again under its key when the step says "later".
 * Every move a step makes is a guarded update, so a run that repeats another does nothing more.
 */
import type { Task } from 'graphile-worker';
import type { JobName } from '../../payments/basics/jobs';
import type { FollowUp } from '../../payments/operations/relay/finish';
import type { WorkerDeps } from '../deps';

function parseRelayPayload(task: JobName, payload: unknown): bigint {
  const id = (payload as { relayTransactionId?: unknown } | null)?.relayTransactionId;
  if (typeof id !== 'string' || !/^[1-9][0-9]{0,18}$/.test(id))
    throw new Error(`${task}: payload needs relayTransactionId as a decimal string`);
  return BigInt(id);
}

export function followUpTask<N extends 'relay_watch' | 'relay_refund'>(
  task: N,
  deps: WorkerDeps,
  step: (id: bigint, deps: WorkerDeps) => Promise<FollowUp>,
  again: (deps: WorkerDeps, id: bigint, at: Date) => Promise<void>,
): Task<N> {
  return async (payload) => {
    const id = parseRelayPayload(task, payload);
    const log = deps.log.child({ task, relayTransactionId: String(id) });
    const result = await step(id, deps);
    if (result.kind === 'done') {
      log.info({ details: result.details }, 'relay transaction followed up');
      return;
    }
    log.debug(
      { details: result.details, lookAgainAt: result.lookAgainAt.toISOString() },
      'relay transaction still open',
    );
    await again(deps, id, result.lookAgainAt);
  };
}
