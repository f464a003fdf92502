/**
 * At 00:00 UTC: opens the new day's counters and prunes spend rows and webhook records past
 * retention. Safe to repeat: opening is an insert that ignores existing rows, pruning deletes by age.
 */
import type { Task } from 'graphile-worker';
import { utcDay } from '../../payments/basics/clock';
import { startDay } from '../../payments/accounts/limits';
import { pruneWebhooks } from '../../payments/tracking/webhooks';
import type { WorkerDeps } from '../deps';

export function dayRollover(deps: WorkerDeps): Task<'day_rollover'> {
  return async (payload) => {
    const cron = (payload as { _cron?: { ts?: unknown } } | null)?._cron;
    // A backfilled run opens the day it was scheduled for, not the day it runs on.
    const at = typeof cron?.ts === 'string' ? new Date(cron.ts) : deps.clock.now();
    if (Number.isNaN(at.getTime())) throw new Error('day_rollover: invalid _cron.ts');
    const day = utcDay(at);
    const { prunedRows } = await startDay(deps.db, day);
    const prunedWebhooks = await pruneWebhooks(deps.db, deps.clock.now());
    deps.log.info({ task: 'day_rollover', day, prunedRows, prunedWebhooks }, 'new day opened');
  };
}
