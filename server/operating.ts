/**
 * The figures of the operating gauges of /metrics (ServiceMetrics.watchOperations): our float and
 * its floors per enabled network, refunds owed, money held in channels, records stuck past their
 * bound. All read from Postgres (the float job's readings), never from a chain.
 */
import type { Db } from '../db/index';
import type { Config } from '../payments/basics/config';
import {
  assetMicroUsdc,
  claimDeadlines,
  floorOf,
  heldInChannels,
  owedRefunds,
  storedFloats,
} from '../payments/tracking/float';
import { stuckStates } from '../payments/tracking/stuck';
import type { OperatingFigures, OperatingSource } from './metrics';

export function operatingSource(db: Db, config: Config, now: () => Date = () => new Date()): OperatingSource {
  return {
    async read(): Promise<OperatingFigures> {
      const [floats, owed, channels, stuck, deadlines] = await Promise.all([
        storedFloats(db),
        owedRefunds(db),
        heldInChannels.read(db),
        stuckStates(db, config, now()),
        claimDeadlines(db),
      ]);
      return {
        networks: config.networks.map(({ name: network }) => {
          const floor = floorOf(config, network);
          const reading = floats.get(network);
          return {
            network,
            ...(floor
              ? { floatFloorMicroUsdc: Number(assetMicroUsdc(network, floor.asset)), gasFloorAtomic: Number(floor.gas) }
              : {}),
            ...(reading
              ? {
                  floatMicroUsdc: Number(assetMicroUsdc(network, reading.asset)),
                  gasAtomic: Number(reading.gas),
                  readAtSeconds: reading.readAt.getTime() / 1000,
                  ...(floor ? { floatBelow: reading.asset < floor.asset, gasBelow: reading.gas < floor.gas } : {}),
                }
              : {}),
            channelMicroUsdc: Number(channels.get(network) ?? 0n),
            refundsOwedMicroUsdc: Number(owed.get(network)?.pendingMicroUsdc ?? 0n),
            ...(deadlines.has(network) ? { claimDeadlineSeconds: deadlines.get(network) } : {}),
          };
        }),
        stuck,
      };
    },
  };
}
