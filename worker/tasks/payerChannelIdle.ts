/**
 * Every five minutes: our payer channels idle for PAYER_CHANNEL_IDLE_SECONDS are given back
 * (payments/outgoing/channelIdle.ts): a cooperative refund asked of the seller, else our own
 * withdrawal, finalized once its delay has passed. Each run takes every closing channel one step
 * further, so a step that failed is tried again by the next run.
 */
import type { Task } from 'graphile-worker';
import { giveBackIdleChannels } from '../../payments/outgoing/channelIdle';
import type { WorkerDeps } from '../deps';

export function payerChannelIdle(deps: WorkerDeps): Task<'payer_channel_idle'> {
  return async () => {
    const steps = await giveBackIdleChannels(deps);
    const moved = steps.filter((step) => step.step !== 'skipped' && step.step !== 'withdraw_waiting');
    if (moved.length > 0)
      deps.log.info(
        { task: 'payer_channel_idle', steps: moved.map(({ channelId, step }) => ({ channelId, step })) },
        'idle payer channels taken a step further',
      );
  };
}
