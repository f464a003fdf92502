/**
 * `npm run admin -- float [--stored]`: every enabled network's float (our wallet's stablecoin), its
 * gas, their floors, the relay refunds still owed and the money held in channels. By default the
 * chains are read now (and the reading stored, as the float job does); with --stored, the float
 * job's last reading is shown without touching a chain.
 */
import { pino } from 'pino';
import type { Db } from '../db/index';
import { GAS_DECIMALS, type Config } from '../payments/basics/config';
import { formatUnits } from '../payments/basics/money';
import { NETWORK_TABLE } from '../payments/basics/networkTable';
import { createChains } from '../payments/chains/index';
import {
  assetMicroUsdc,
  floorOf,
  formatAtomic,
  gasSymbol,
  heldInChannels,
  owedRefunds,
  refreshWalletFloats,
  storedFloats,
  type FloatRead,
} from '../payments/tracking/float';

export async function floatReport(
  db: Db,
  config: Config,
  print: (line: string) => void,
  { stored }: { stored: boolean },
): Promise<void> {
  let reads: FloatRead[] = [];
  // No wallet key here (the sandbox keeps its own): the running service's readings are what there is.
  const noKeys = config.evmPrivateKey === undefined && config.solanaPrivateKey === undefined;
  if (!stored && !noKeys) {
    const chains = await createChains(config, { rpcTimeoutMs: config.rpcTimeoutMs });
    try {
      reads = await refreshWalletFloats({ db, chains, config, log: pino({ level: 'silent' }) });
    } finally {
      await chains.close();
    }
  }
  const [readings, owed, channels] = await Promise.all([storedFloats(db), owedRefunds(db), heldInChannels.read(db)]);
  const now = Date.now();
  print(
    stored || noKeys
      ? `the float job's last readings (${stored ? '--stored' : 'no wallet key configured here'}: no chain was read)`
      : 'read from the chains now',
  );
  for (const { name: network } of config.networks) {
    const { symbol, chainType } = NETWORK_TABLE[network];
    const gasDecimals = GAS_DECIMALS[chainType];
    const gasUnit = gasSymbol(network);
    const floor = floorOf(config, network);
    if (!floor) continue;
    const { configured } = floor;
    const reading = readings.get(network);
    const read = reads.find((entry) => entry.network === network);
    print(`${network}:`);
    if (read?.kind === 'no_wallet' || (!reading && read?.kind !== 'failed')) {
      print(
        read?.kind === 'no_wallet'
          ? '  no wallet key configured for this network'
          : '  never read (the float job has not run yet)',
      );
    }
    if (reading) {
      const below = [
        reading.asset < floor.asset ? 'FLOAT BELOW FLOOR' : undefined,
        reading.gas < floor.gas ? 'GAS BELOW FLOOR' : undefined,
      ].filter(Boolean);
      print(`  wallet            ${reading.wallet}`);
      print(
        `  float             ${formatUnits(assetMicroUsdc(network, reading.asset), 6)} ${symbol}  (floor ${configured.assetUsdc}, ${configured.assetVariable})`,
      );
      print(
        `  gas               ${formatAtomic(reading.gas, gasDecimals)} ${gasUnit}  (floor ${configured.gas}, ${configured.gasVariable})`,
      );
      print(
        `  read              ${reading.readAt.toISOString()} (${Math.round((now - reading.readAt.getTime()) / 1000)} s ago)${reading.error ? `; a later read failed: ${reading.error}` : ''}`,
      );
      print(
        `  status            ${below.length > 0 ? `${below.join(', ')}: /relay and /proxy refuse paid calls here` : 'ok'}`,
      );
    }
    if (read?.kind === 'failed') print(`  read failed now:  ${read.details}`);
    const refunds = owed.get(network);
    print(
      `  pending refunds   ${formatUnits(refunds?.pendingMicroUsdc ?? 0n, 6)} USDC (${refunds?.pendingCount ?? 0}); failed, for an operator: ${formatUnits(refunds?.failedMicroUsdc ?? 0n, 6)} USDC (${refunds?.failedCount ?? 0})`,
    );
    print(
      `  held in channels  ${formatUnits(channels.get(network) ?? 0n, 6)} USDC${heldInChannels.installed ? '' : ' (no channel funds are tracked yet)'}`,
    );
  }
}
