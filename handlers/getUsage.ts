import type { components } from '../codegen/api';
import type { Handler } from './types';
import { errorReply, requireApiKey } from './errors';
import { usageRange, usageReport, type UsageFigures } from '../payments/accounts/usage';

type Figures = components['schemas']['UsageFigures'];

export const getUsage: Handler<'getUsage'> = async (ctx, { db, clock }) => {
  const key = requireApiKey(ctx);
  const range = usageRange(ctx.query.from, ctx.query.to, clock.now());
  if (!range.ok) return errorReply('validation_failed', range.details);
  const report = await usageReport(db, key.organisationId, range.value);
  return {
    status: 200,
    body: {
      from: report.fromDay,
      to: report.toDay,
      totals: {
        ...figures(report.totals),
        granted_credits: Number(report.totals.grantedCredits),
        purchased_credits: Number(report.totals.purchasedCredits),
      },
      by_day: report.byDay.map((day) => ({ day: day.day, ...figures(day) })),
      by_key: report.byKey.map((key) => ({ key_prefix: key.keyPrefix, ...figures(key) })),
      by_host: report.byHost.map((host) => ({ host: host.host, ...figures(host) })),
      hosts_truncated: report.hostsTruncated,
    },
  };
};

/** Counts and credits as JSON numbers (credits stay far below 2^53), micro-USDC as decimal strings. */
function figures(bucket: UsageFigures): Figures {
  return {
    payments: Number(bucket.payments),
    credits: Number(bucket.credits),
    amount_micro_usdc: bucket.amountMicroUsdc.toString(),
    fee_micro_usdc: bucket.feeMicroUsdc.toString(),
    released_payments: Number(bucket.releasedPayments),
    released_credits: Number(bucket.releasedCredits),
    pending_payments: Number(bucket.pendingPayments),
    pending_credits: Number(bucket.pendingCredits),
  };
}
