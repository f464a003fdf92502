/**
 * The task list and crontab of our graphile-worker: one file per task, registered here.
 */
import { parseCronItems, type TaskList } from 'graphile-worker';
import type { WorkerDeps } from './deps';
import { CHAT_FOLLOW_UP, chatFollowUp } from './tasks/chatFollowUp';
import { DAY_ROLLOVER, dayRollover } from './tasks/dayRollover';
import { IDEMPOTENCY_PRUNE, idempotencyPrune } from './tasks/idempotencyPrune';
import { PROXY_PAYMENT_SWEEP, proxyPaymentSweep } from './tasks/proxyPaymentSweep';
import { PROXY_PAYMENT_WATCH, proxyPaymentWatch } from './tasks/proxyPaymentWatch';
import { RELAY_REFUND, relayRefund } from './tasks/relayRefund';
import { RELAY_WATCH, relayWatch } from './tasks/relayWatch';
import { RELAY_SWEEP, relaySweep } from './tasks/relaySweep';

export function createTaskList(deps: WorkerDeps): TaskList {
  return {
    [DAY_ROLLOVER]: dayRollover(deps),
    [PROXY_PAYMENT_WATCH]: proxyPaymentWatch(deps),
    [PROXY_PAYMENT_SWEEP]: proxyPaymentSweep(deps),
    [RELAY_WATCH]: relayWatch(deps),
    [RELAY_REFUND]: relayRefund(deps),
    [RELAY_SWEEP]: relaySweep(deps),
    [CHAT_FOLLOW_UP]: chatFollowUp(deps),
    [IDEMPOTENCY_PRUNE]: idempotencyPrune(deps),
  };
}

/**
 * Cron is evaluated in UTC. A missed midnight within the last hour is run late rather than skipped;
 * a missed sweep is not backfilled (the next one covers it).
 */
export const cronItems = parseCronItems([
  { task: DAY_ROLLOVER, match: '0 0 * * *', identifier: DAY_ROLLOVER, options: { backfillPeriod: 60 * 60 * 1000 } },
  { task: PROXY_PAYMENT_SWEEP, match: '* * * * *', identifier: PROXY_PAYMENT_SWEEP, options: { backfillPeriod: 0 } },
  { task: RELAY_SWEEP, match: '* * * * *', identifier: RELAY_SWEEP, options: { backfillPeriod: 0 } },
  { task: CHAT_FOLLOW_UP, match: '* * * * *', identifier: CHAT_FOLLOW_UP, options: { backfillPeriod: 0 } },
  { task: IDEMPOTENCY_PRUNE, match: '17 * * * *', identifier: IDEMPOTENCY_PRUNE, options: { backfillPeriod: 0 } },
]);
