/**
 * Every minute, and whenever enqueued: what channel clients owe us is watched, claimed in batches
 * and settled (payments/incoming/channels/claims.ts): at once for a channel whose payer started a
 * withdrawal (long before its delay ends: the delay is at least 15 minutes), else on the threshold
 * or the period of CHANNEL_RECEIVER_CLAIM_*.
 */
import type { Task } from 'graphile-worker';
import { collectChannels } from '../../payments/incoming/channels/claims';
import type { WorkerDeps } from '../deps';

export function channelClaims(deps: WorkerDeps): Task<'channel_claims'> {
  return async (payload) => {
    const reports = await collectChannels(deps, { force: payload.force === true });
    for (const report of reports)
      if (report.claims.length > 0 || report.settle)
        deps.log.info(
          {
            task: 'channel_claims',
            network: report.network,
            reason: report.reason,
            claims: report.claims.length,
            settled: report.settle ? String(report.settle.amount) : undefined,
          },
          'channel claims done',
        );
  };
}
