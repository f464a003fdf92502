// A local EVM chain per network: hardhat 2's in-process EDR node with the network's real chain id,
// served over JSON-RPC on 127.0.0.1 by hardhat's own server. Internal module paths: hardhat is
// pinned at 2.29.1 in package.json for that reason.
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { createPublicClient, defineChain, http, type Chain, type Hex, type PublicClient } from 'viem';
import { EVM_NETWORKS, type EvmNetworkName } from '../networks.js';
import { repositoryRoot } from '../root.js';

const REPOSITORY_ROOT = repositoryRoot(import.meta.url);
const HARDHAT_CONFIG_PATH = path.join(REPOSITORY_ROOT, 'hardhat.config.cjs');

/**
 * The local chain mines a block only when a transaction arrives, so while idle its latest block
 * falls behind the wall clock, and contract calls run at that block's timestamp: an authorization
 * signed with validAfter = now - 60 (as several clients sign) would then revert as "not yet valid"
 * in every simulation after a minute of silence. A live chain produces blocks on its own (Base
 * every 2 s), so an idle local chain mines an empty block once its latest block is this many
 * seconds behind. Not on a fixed interval: a busy chain needs none, and every empty block stays in
 * memory (about 1.6 KB each).
 */
export const MAX_CLOCK_LAG_SECONDS = 5;
/** How often the lag is checked; the latest block is at most MAX_CLOCK_LAG_SECONDS plus this behind. */
const CLOCK_CHECK_INTERVAL_MS = 1_000;

export interface FundedAccount {
  privateKey: Hex;
  balanceWei: bigint;
}

export interface LocalEvmChain {
  network: EvmNetworkName;
  chainId: number;
  rpcUrl: string;
  chain: Chain;
  publicClient: PublicClient;
  /**
   * Mines until the latest block's timestamp is at least `unixSeconds`, as a live chain would by
   * producing blocks. The local chain mines only on request, and its clock can lag the wall clock
   * by a second, so a single block mined just after the wall clock passed is not always enough.
   */
  mineUntil(unixSeconds: bigint): Promise<void>;
  close(): Promise<void>;
}

interface EthereumProvider {
  request(args: { method: string; params?: unknown[] }): Promise<unknown>;
}

/**
 * Mines an empty block whenever the latest one lags the wall clock by MAX_CLOCK_LAG_SECONDS. The
 * block takes the wall clock's time (blocks may share a timestamp, see hardhat.config.cjs), never
 * a later one, so this cannot push the chain ahead of the clock authorizations are timed by.
 */
function keepChainClock(provider: EthereumProvider): () => void {
  let checking = false;
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    (async () => {
      const latest = (await provider.request({ method: 'eth_getBlockByNumber', params: ['latest', false] })) as {
        timestamp: string;
      };
      const now = Math.floor(Date.now() / 1000);
      const lag = now - Number(BigInt(latest.timestamp));
      // At the wall clock's time, named: a block mined without one after an evm_revert takes a
      // time ahead of the wall clock by the reverted snapshot's age (the node keeps its offset),
      // and the chain would then expire every authorization early by that much.
      if (lag >= MAX_CLOCK_LAG_SECONDS) await provider.request({ method: 'evm_mine', params: [now] });
    })()
      // A chain being closed may refuse a request; the next check (if any) tries again.
      .catch(() => {})
      .finally(() => {
        checking = false;
      });
  }, CLOCK_CHECK_INTERVAL_MS);
  // The sandbox and tests end when their work ends, not when this timer says so.
  timer.unref();
  return () => clearInterval(timer);
}

interface Hardhat {
  /** Hardhat's one EDR context per process, made ready once before any chain starts. */
  edrReady: Promise<unknown>;
  resolveConfig: (configPath: string, userConfig: unknown) => unknown;
  createProvider: (config: unknown, networkName: string) => Promise<unknown>;
  JsonRpcServer: new (config: { hostname: string; port: number; provider: unknown }) => {
    listen(): Promise<{ address: string; port: number }>;
    close(): Promise<void>;
  };
  userConfig: { networks: { hardhat: Record<string, unknown> } };
}

let hardhat: Hardhat | undefined;

function loadHardhat(): Hardhat {
  if (hardhat) return hardhat;
  // Hardhat writes under ~/.config, ~/.local/share and ~/.cache: keep that inside the repository.
  const stateDirectory = path.join(REPOSITORY_ROOT, '.cache', 'hardhat');
  for (const [variable, folder] of [
    ['XDG_CONFIG_HOME', 'config'],
    ['XDG_DATA_HOME', 'data'],
    ['XDG_CACHE_HOME', 'cache'],
  ] as const) {
    const directory = path.join(stateDirectory, folder);
    mkdirSync(directory, { recursive: true });
    process.env[variable] = directory;
  }
  const require = createRequire(import.meta.url);
  hardhat = {
    // getGlobalEdrContext publishes its context before registering the provider factory: two
    // chains started at the same moment in a fresh process race ("Provider for provided chain type
    // does not exist"). Awaiting it once, before any chain, closes the race.
    edrReady: (
      require('hardhat/internal/hardhat-network/provider/provider') as { getGlobalEdrContext: () => Promise<unknown> }
    ).getGlobalEdrContext(),
    resolveConfig: (require('hardhat/internal/core/config/config-resolution') as Pick<Hardhat, 'resolveConfig'>)
      .resolveConfig,
    createProvider: (require('hardhat/internal/core/providers/construction') as Pick<Hardhat, 'createProvider'>)
      .createProvider,
    JsonRpcServer: (require('hardhat/internal/hardhat-network/jsonrpc/server') as Pick<Hardhat, 'JsonRpcServer'>)
      .JsonRpcServer,
    userConfig: require(HARDHAT_CONFIG_PATH) as Hardhat['userConfig'],
  };
  return hardhat;
}

export function localViemChain(network: EvmNetworkName, rpcUrl: string): Chain {
  return defineChain({
    id: EVM_NETWORKS[network].chainId,
    name: `${network} (local)`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

/** A viem transport for the local chains: a revert is an answer, so no retries (hardhat reports it as -32603). */
export function localTransport(rpcUrl: string) {
  return http(rpcUrl, { retryCount: 0, timeout: 10_000 });
}

export async function startEvmChain(network: EvmNetworkName, fundedAccounts: FundedAccount[]): Promise<LocalEvmChain> {
  const { edrReady, resolveConfig, createProvider, JsonRpcServer, userConfig } = loadHardhat();
  await edrReady;
  const chainId = EVM_NETWORKS[network].chainId;
  const config = resolveConfig(HARDHAT_CONFIG_PATH, {
    ...userConfig,
    networks: {
      hardhat: {
        ...userConfig.networks.hardhat,
        chainId,
        accounts: fundedAccounts.map((account) => ({
          privateKey: account.privateKey,
          balance: account.balanceWei.toString(),
        })),
      },
    },
  });
  const provider = await createProvider(config, 'hardhat');
  const server = new JsonRpcServer({ hostname: '127.0.0.1', port: 0, provider });
  const { port } = await server.listen();
  const stopClock = keepChainClock(provider as EthereumProvider);
  const rpcUrl = `http://127.0.0.1:${port}`;
  const chain = localViemChain(network, rpcUrl);
  const publicClient = createPublicClient({ chain, transport: localTransport(rpcUrl), pollingInterval: 20 });
  async function mineUntil(unixSeconds: bigint): Promise<void> {
    for (let attempt = 0; attempt < 40; attempt++) {
      await publicClient.request({ method: 'evm_mine' } as never);
      const block = await publicClient.getBlock({ blockTag: 'latest' });
      if (block.timestamp >= unixSeconds) return;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    throw new Error(`${network}: no block reached timestamp ${unixSeconds} within 10 s`);
  }
  return {
    network,
    chainId,
    rpcUrl,
    chain,
    publicClient,
    mineUntil,
    close: async () => {
      stopClock();
      await server.close();
    },
  };
}
