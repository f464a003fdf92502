/**
 * Per-network viem clients built from our configuration, and our wallet from EVM_PRIVATE_KEY.
 *
 * Chains are our own (`defineChain` with the table's chain id and the configured RPC URL), never
 * viem's built-in definitions: the EIP-712 domain takes its chain id from our table. Transports do
 * not retry (a revert is an answer) and every request has a timeout (./transport.ts).
 */
import {
  createPublicClient,
  createWalletClient,
  defineChain,
  getAddress,
  type Account,
  type Address,
  type Chain,
  type Hex,
  type PublicClient,
  type Transport,
  type WalletClient,
} from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import { serviceAccount } from './account';
import { ConfigError, type Config } from '../../basics/config';
import { fail, ok, type Result } from '../../basics/result';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import type { RpcObserver } from '../rpcTiming';
import { rpcTransport } from './transport';

export const DEFAULT_RPC_TIMEOUT_MS = 10_000;

export interface EvmNetworkClients {
  network: NetworkName;
  chainId: number;
  usdc: Address;
  chain: Chain;
  publicClient: PublicClient<Transport, Chain>;
  /** Present when EVM_PRIVATE_KEY is configured. */
  walletClient: WalletClient<Transport, Chain, Account> | undefined;
}

/** The clients of one enabled EVM network, or why there are none. */
export type ClientsOf = (network: NetworkName) => Result<EvmNetworkClients, 'network_not_enabled'>;

export function evmChain(network: NetworkName, rpcUrl: string): Chain {
  const { chainId } = NETWORK_TABLE[network];
  if (chainId === undefined) throw new RangeError(`${network} is not an EVM network`);
  return defineChain({
    id: chainId,
    name: network,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

export function parsePrivateKey(key: string): PrivateKeyAccount {
  try {
    return serviceAccount(key as Hex);
  } catch {
    throw new ConfigError('EVM_PRIVATE_KEY', 'not a valid secp256k1 private key');
  }
}

export function evmNetworkClients(
  config: Pick<Config, 'networks'>,
  account: PrivateKeyAccount | undefined,
  timeout: number,
  observe?: RpcObserver,
): Map<NetworkName, EvmNetworkClients> {
  const networks = new Map<NetworkName, EvmNetworkClients>();
  for (const settings of config.networks) {
    if (NETWORK_TABLE[settings.name].chainType !== 'evm') continue;
    const chain = evmChain(settings.name, settings.rpcUrl);
    const transport = rpcTransport(settings.rpcUrl, { timeout, network: settings.name, observe });
    networks.set(settings.name, {
      network: settings.name,
      chainId: chain.id,
      usdc: getAddress(settings.usdc),
      chain,
      publicClient: createPublicClient({ chain, transport }),
      walletClient: account ? createWalletClient({ account, chain, transport }) : undefined,
    });
  }
  return networks;
}

export function clientsLookup(networks: ReadonlyMap<NetworkName, EvmNetworkClients>): ClientsOf {
  return (network) => {
    const clients = networks.get(network);
    return clients ? ok(clients) : fail('network_not_enabled', `${network} is not an enabled EVM network`);
  };
}
