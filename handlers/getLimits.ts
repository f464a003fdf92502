import type { Handler } from './types';
import { nextUtcMidnight, utcDay } from '../payments/basics/clock';
import { systemVolumes, type VolumeFigures } from '../payments/accounts/limits';
import { microToUsdc, percentageText, usdToMicro } from '../payments/basics/money';

export function volumeView({ limitMicro, spentMicro }: VolumeFigures) {
  const remainingMicro = spentMicro >= limitMicro ? 0n : limitMicro - spentMicro;
  return {
    daily_limit: microToUsdc(limitMicro),
    today_spent: microToUsdc(spentMicro),
    remaining: microToUsdc(remainingMicro),
    percentage_used: percentageText(spentMicro, limitMicro),
  };
}

export const getLimits: Handler<'getLimits'> = async (_ctx, { db, config, clock }) => {
  const now = clock.now();
  const volumes = await systemVolumes(db, utcDay(now), {
    relayTotalMicro: usdToMicro(config.relayDailyTotalUsd),
    proxyTotalMicro: usdToMicro(config.proxyDailyTotalUsd),
  });
  return {
    status: 200,
    body: {
      relay: {
        mainnet: volumeView(volumes.relay.mainnet),
        testnet: volumeView(volumes.relay.testnet),
        per_wallet_daily_limit: config.relayDailyPerWalletUsd,
      },
      proxy: {
        mainnet: volumeView(volumes.proxy.mainnet),
        testnet: volumeView(volumes.proxy.testnet),
        per_account_daily_limit: config.proxyDailyPerAccountUsd,
      },
      unit: 'USDC',
      reset_time: nextUtcMidnight(now).toISOString(),
    },
  };
};
