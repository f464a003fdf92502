import type { Handler } from './types';
import { requireApiKey } from './errors';
import { utcDay } from '../payments/basics/clock';
import { organisationBalance } from '../payments/accounts/credits';
import { spentOn } from '../payments/accounts/limits';

export const getCreditsBalance: Handler<'getCreditsBalance'> = async (ctx, { db, clock }) => {
  const key = requireApiKey(ctx);
  const [balance, spent] = await Promise.all([
    organisationBalance(db, key.organisationId),
    spentOn(db, { scope: 'api_key', scopeId: String(key.apiKeyId), networkClass: 'all', day: utcDay(clock.now()) }),
  ]);
  return {
    status: 200,
    body: {
      key_prefix: key.prefix,
      daily_cap: Number(key.dailyCapCredits),
      daily_spent: Number(spent),
      daily_remaining: Number(spent >= key.dailyCapCredits ? 0n : key.dailyCapCredits - spent),
      effective_available: Number(balance),
      policy: {
        default_max_amount: key.policy.defaultMaxMicroUsdc?.toString() ?? null,
        hard_max_amount: key.policy.hardMaxMicroUsdc?.toString() ?? null,
        allowed_hosts: key.policy.allowedHosts === null ? null : [...key.policy.allowedHosts],
      },
    },
  };
};
