/**
 * `npm run sandbox:drain -- [network] [--gas]`: drains the running sandbox's service wallet on one
 * of its local EVM chains (default base, a mainnet, whose float floor is 10 USDC by default): its
 * whole stablecoin is moved away by a real transfer, and with --gas its ETH is set to 0. The
 * service's float is then read again at once (the float_refresh job), and paid calls on that
 * network are refused with 503 float_below_floor (gas_below_floor) before anything of the
 * client's moves, e.g. `npm run sandbox:pay -- proxy <the target of that network>`. Restarting
 * `npm start` brings fresh, funded chains back. Reads DATA_DIR/sandbox.json and sandbox-keys.json.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Hex } from 'viem';
import { createDb } from '../db/index';
import { runningEmbeddedUrl } from '../db/embedded';
import { queueFloatRefresh } from '../payments/tracking/float';
import { drainLocalEvmWallet } from './drain';
import { isEvmNetwork, type NetworkName } from './networks';
import type { SandboxState } from './sandbox';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const gas = args.includes('--gas');
  const network = (args.find((arg) => !arg.startsWith('--')) ?? 'base') as NetworkName;
  const dataDir = path.resolve(process.env.DATA_DIR ?? './.data');
  let state: SandboxState;
  let keys: { serviceEvmPrivateKey: Hex };
  try {
    state = JSON.parse(readFileSync(path.join(dataDir, 'sandbox.json'), 'utf8')) as SandboxState;
    keys = JSON.parse(readFileSync(path.join(dataDir, 'sandbox-keys.json'), 'utf8')) as { serviceEvmPrivateKey: Hex };
  } catch {
    process.stderr.write(`no running sandbox in ${dataDir} (start one with npm start, nothing configured)\n`);
    process.exit(1);
  }
  const rpcUrl = state.rpc[network];
  if (!isEvmNetwork(network) || rpcUrl === undefined) {
    const evm = Object.keys(state.rpc).filter((name) => isEvmNetwork(name as NetworkName));
    process.stderr.write(`${network} is not one of the sandbox's local EVM chains: ${evm.join(', ')}\n`);
    process.exit(2);
  }
  const drained = await drainLocalEvmWallet(network, rpcUrl, keys.serviceEvmPrivateKey, { gas });
  process.stdout.write(
    `drained the service wallet ${drained.wallet} on ${network}: ${drained.asset} atomic units of its stablecoin moved away${drained.gas === undefined ? '' : `, ${drained.gas} wei of gas set to 0`}\n`,
  );
  const databaseUrl = process.env.DATABASE_URL ?? runningEmbeddedUrl(dataDir);
  if (databaseUrl !== undefined) {
    const handle = createDb(databaseUrl);
    try {
      await queueFloatRefresh(handle.db, 0);
      process.stdout.write('the service reads its float again now\n');
    } finally {
      await handle.close();
    }
  }
  const target = Object.entries(state.targetDetails).find(
    ([, details]) => details.network === network && details.x402Version === 1,
  );
  process.stdout.write(
    `a paid call on ${network} now gets 503 ${gas ? 'float_below_floor (or gas_below_floor)' : 'float_below_floor'}${target ? `:\n  npm run sandbox:pay -- proxy ${target[1].url}/paid` : ''}\n  npm run admin -- float --stored   # the float of every network\n`,
  );
}

await main();
