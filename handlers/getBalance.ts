import type { Handler } from './types';
import { requireApiKey } from './errors';
import { utcDay } from '../payments/basics/clock';
import { organisationBalance } from '../payments/accounts/credits';
import { spentOn } from '../payments/accounts/limits';
import { CREDITS_PER_USDC, creditsToUsdc } from '../payments/basics/money';

/** mainnet daily_* figures are in credits; testnet figures are in USD, as their names say. */
export const getBalance: Handler<'getBalance'> = async (ctx, { db, config, clock }) => {
  const key = requireApiKey(ctx);
  const day = utcDay(clock.now());
  const limitCredits = BigInt(config.proxyDailyPerAccountUsd) * CREDITS_PER_USDC;
  const scopeId = String(key.accountId);
  const [balance, mainnetSpent, testnetSpent] = await Promise.all([
    organisationBalance(db, key.organisationId),
    spentOn(db, { scope: 'proxy_account', scopeId, networkClass: 'mainnet', day }),
    spentOn(db, { scope: 'proxy_account', scopeId, networkClass: 'testnet', day }),
  ]);
  const remaining = (spent: bigint) => (spent >= limitCredits ? 0n : limitCredits - spent);
  return {
    status: 200,
    body: {
      account_id: key.accountPublicId,
      mainnet: {
        credits_balance: Number(balance),
        daily_limit: Number(limitCredits),
        daily_spend: Number(mainnetSpent),
        daily_remaining: Number(remaining(mainnetSpent)),
      },
      testnet: {
        daily_limit_usd: config.proxyDailyPerAccountUsd,
        today_spent_usd: creditsToUsdc(testnetSpent),
        remaining_usd: creditsToUsdc(remaining(testnetSpent)),
      },
    },
  };
};
