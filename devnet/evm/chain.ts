// A local EVM chain per network: hardhat 2's in-process EDR node with the network's real chain id,
// served over JSON-RPC on 127.0.0.1 by hardhat's own server. Internal module paths: hardhat is
// pinned at 2.29.1 in package.json for that reason.
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createPublicClient, defineChain, http, type Chain, type Hex, type PublicClient } from 'viem';
import { EVM_NETWORKS, type EvmNetworkName } from '../networks.js';

const REPOSITORY_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const HARDHAT_CONFIG_PATH = path.join(REPOSITORY_ROOT, 'hardhat.config.cjs');

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

interface Hardhat {
  /** Hardhat's one EDR context per process, made ready once before any chain starts. */
  edrReady: Promise<unknown>;
  resolveConfig(configPath: string, userConfig: unknown): unknown;
  createProvider(config: unknown, networkName: string): Promise<unknown>;
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
    edrReady: require('hardhat/internal/hardhat-network/provider/provider').getGlobalEdrContext(),
    resolveConfig: require('hardhat/internal/core/config/config-resolution').resolveConfig,
    createProvider: require('hardhat/internal/core/providers/construction').createProvider,
    JsonRpcServer: require('hardhat/internal/hardhat-network/jsonrpc/server').JsonRpcServer,
    userConfig: require(HARDHAT_CONFIG_PATH),
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
  return { network, chainId, rpcUrl, chain, publicClient, mineUntil, close: () => server.close() };
}
