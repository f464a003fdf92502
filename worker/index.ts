/**
 * The task list and crontab of our graphile-worker: one file per task, registered here.
 */
import { parseCronItems, type Task, type TaskList } from 'graphile-worker';
import type { LossObserver } from '../payments/tracking/finality';
import type { JobName, JobPayloads } from '../payments/basics/jobs';
import type { WorkerDeps } from './deps';
import { channelClaims } from './tasks/channelClaims';
import { chatFollowUp } from './tasks/chatFollowUp';
import { creditPurchaseWatch } from './tasks/creditPurchaseWatch';
import { dayRollover } from './tasks/dayRollover';
import { finalityFollow } from './tasks/finalityFollow';
import { finalitySweep } from './tasks/finalitySweep';
import { finalityWatch } from './tasks/finalityWatch';
import { floatRefresh } from './tasks/floatRefresh';
import { idempotencyPrune } from './tasks/idempotencyPrune';
import { payerChannelIdle } from './tasks/payerChannelIdle';
import { proxyPaymentSweep } from './tasks/proxyPaymentSweep';
import { proxyPaymentWatch } from './tasks/proxyPaymentWatch';
import { relayFollow } from './tasks/relayFollow';
import { relayRefund } from './tasks/relayRefund';
import { relayWatch } from './tasks/relayWatch';
import { relaySweep } from './tasks/relaySweep';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace -- graphile-worker's catalog of task payloads is this global namespace
  namespace GraphileWorker {
    // The catalog of payments/basics/jobs.ts is the worker's: a task's payload and its job's are one type.
    // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- the members are JobPayloads'
    interface Tasks extends JobPayloads {}
  }
}

/** One task for every name of the catalog (payments/basics/jobs.ts), and no other. */
export function createTaskList(deps: WorkerDeps, { onPaymentLost }: { onPaymentLost?: LossObserver } = {}): TaskList {
  const tasks: { [N in JobName]: Task<N> } = {
    day_rollover: dayRollover(deps),
    proxy_payment_watch: proxyPaymentWatch(deps),
    proxy_payment_sweep: proxyPaymentSweep(deps),
    relay_watch: relayWatch(deps),
    relay_follow: relayFollow(deps),
    relay_refund: relayRefund(deps),
    relay_sweep: relaySweep(deps),
    chat_follow_up: chatFollowUp(deps),
    credit_purchase_watch: creditPurchaseWatch(deps),
    idempotency_prune: idempotencyPrune(deps),
    finality_watch: finalityWatch(deps),
    finality_follow: finalityFollow(deps, onPaymentLost),
    finality_sweep: finalitySweep(deps),
    channel_claims: channelClaims(deps),
    float_refresh: floatRefresh(deps),
    payer_channel_idle: payerChannelIdle(deps),
  };
  return tasks;
}

/**
 * Cron is evaluated in UTC. A missed midnight within the last hour is run late rather than skipped;
 * a missed sweep is not backfilled (the next one covers it).
 */
const cron = (task: JobName, match: string, backfillPeriod: number) => ({
  task,
  match,
  identifier: task,
  options: { backfillPeriod },
});

export const cronItems = parseCronItems([
  cron('day_rollover', '0 0 * * *', 60 * 60 * 1000),
  cron('proxy_payment_sweep', '* * * * *', 0),
  cron('relay_sweep', '* * * * *', 0),
  cron('chat_follow_up', '* * * * *', 0),
  cron('idempotency_prune', '17 * * * *', 0),
  cron('finality_sweep', '* * * * *', 0),
  cron('channel_claims', '* * * * *', 0),
  cron('payer_channel_idle', '*/5 * * * *', 0),
]);
