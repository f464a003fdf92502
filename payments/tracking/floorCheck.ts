/**
 * The floors of /relay and /proxy: a paid call whose money would move on a network where our
 * wallet's stablecoin or gas, as the float job last read it (float.ts), is under the network's
 * floor (FLOAT_FLOOR_USDC_<NETWORK>, GAS_FLOOR_<NETWORK>) is refused with 503 before anything of
 * the client's moves: no credits held, no payment verified or settled. No chain is read here: the
 * process's FloatView of the stored readings is (at most one database read a second).
 *
 * A network never read yet (the job has not run) is not refused: readiness reports a chain that
 * cannot be read, and a payment our wallet cannot make fails on its own, before the client's money
 * moves (payments/operations). A floor of 0 (the default on testnets) never refuses.
 */
import { formatUnits } from '../basics/money';
import { GAS_DECIMALS } from '../basics/config';
import { NETWORK_TABLE, type NetworkName } from '../basics/networkTable';
import type { Deps } from '../deps';
import { assetMicroUsdc, floatViewOf, floorOf, formatAtomic, gasSymbol } from './float';

export interface WalletBelowFloor {
  kind: 'wallet_below_floor';
  /** float_below_floor: the stablecoin; gas_below_floor: the gas token. */
  code: 'float_below_floor' | 'gas_below_floor';
  network: NetworkName;
  details: string;
}

/** The first of `networks` (in order) whose last reading is under a floor, or undefined. */
export async function floorRefusal(
  deps: Pick<Deps, 'db' | 'config' | 'clock'>,
  networks: readonly NetworkName[],
): Promise<WalletBelowFloor | undefined> {
  const nowMs = deps.clock.now().getTime();
  const readings = await floatViewOf(deps.db).current();
  for (const network of new Set(networks)) {
    const floor = floorOf(deps.config, network);
    const reading = readings.get(network);
    if (!floor || !reading) continue;
    const ago = `read ${Math.max(0, Math.round((nowMs - reading.readAt.getTime()) / 1000))} s ago`;
    const { configured } = floor;
    const { symbol, chainType } = NETWORK_TABLE[network];
    if (reading.asset < floor.asset) {
      return {
        kind: 'wallet_below_floor',
        code: 'float_below_floor',
        network,
        details: `The service's ${symbol} float on ${network} (${formatUnits(assetMicroUsdc(network, reading.asset), 6)} ${symbol}, ${ago}) is below its floor of ${configured.assetUsdc} (${configured.assetVariable}): paid calls on ${network} are refused until an operator tops the wallet up. Nothing was charged.`,
      };
    }
    if (reading.gas < floor.gas) {
      const decimals = GAS_DECIMALS[chainType];
      return {
        kind: 'wallet_below_floor',
        code: 'gas_below_floor',
        network,
        details: `The service's gas on ${network} (${formatAtomic(reading.gas, decimals)} ${gasSymbol(network)}, ${ago}) is below its floor of ${configured.gas} (${configured.gasVariable}): paid calls on ${network} are refused until an operator tops the wallet up. Nothing was charged.`,
      };
    }
  }
  return undefined;
}
