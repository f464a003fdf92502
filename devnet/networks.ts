// The networks the local peers imitate: real chain ids, canonical USDC addresses and EIP-712
// domains (docs/architecture.md section 4). The harness keeps its own copy of this table on purpose: it is
// the independent reference that the service's own table is tested against.
import type { Address } from 'viem';

export const EVM_NETWORKS = {
  base: {
    chainId: 8453,
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    eip712: { name: 'USD Coin', version: '2' },
    class: 'mainnet',
  },
  'base-sepolia': {
    chainId: 84532,
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    eip712: { name: 'USDC', version: '2' },
    class: 'testnet',
  },
  'skale-base': {
    chainId: 1187947933,
    usdc: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    class: 'mainnet',
  },
  'skale-base-sepolia': {
    chainId: 324705682,
    usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    class: 'testnet',
  },
  // Beyond the six of the interface: started only when a test names it.
  polygon: {
    chainId: 137,
    usdc: '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359',
    eip712: { name: 'USD Coin', version: '2' },
    class: 'mainnet',
    onlyWhenNamed: true,
  },
} as const satisfies Record<
  string,
  {
    chainId: number;
    usdc: Address;
    eip712: { name: string; version: string };
    class: 'mainnet' | 'testnet';
    onlyWhenNamed?: boolean;
  }
>;

export const SOLANA_NETWORKS = {
  solana: { usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v', class: 'mainnet' },
  'solana-devnet': { usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU', class: 'testnet' },
} as const;

export type EvmNetworkName = keyof typeof EVM_NETWORKS;
export type SolanaNetworkName = keyof typeof SOLANA_NETWORKS;
export type NetworkName = EvmNetworkName | SolanaNetworkName;

export const EVM_NETWORK_NAMES = Object.keys(EVM_NETWORKS) as EvmNetworkName[];
export const SOLANA_NETWORK_NAMES = Object.keys(SOLANA_NETWORKS) as SolanaNetworkName[];
export const NETWORK_NAMES: NetworkName[] = [...EVM_NETWORK_NAMES, ...SOLANA_NETWORK_NAMES];
/** The networks the peers start when none are named: all but those started only when named. */
export const DEFAULT_PEER_NETWORKS: NetworkName[] = NETWORK_NAMES.filter(
  (network) => !(isEvmNetwork(network) && 'onlyWhenNamed' in EVM_NETWORKS[network]),
);

export const USDC_DECIMALS = 6;

/**
 * The local EVM chains mine only on request (and an idle block every few seconds): the service is
 * told (FINALITY_DEPTH_<NAME>) that a transaction there is final this many blocks deep, where the
 * live network's row names its finalized head. The local Solana ledger reports a transaction
 * `finalized` at once.
 */
export const LOCAL_FINALITY_DEPTH = 2;

export function isEvmNetwork(network: string): network is EvmNetworkName {
  return Object.hasOwn(EVM_NETWORKS, network);
}

export function isSolanaNetwork(network: string): network is SolanaNetworkName {
  return Object.hasOwn(SOLANA_NETWORKS, network);
}

/** CAIP-2 ids, as x402 version 2 names the networks (DESIGN.md section 6b). */
export const CAIP2_NETWORKS = {
  base: 'eip155:8453',
  'base-sepolia': 'eip155:84532',
  'skale-base': 'eip155:1187947933',
  'skale-base-sepolia': 'eip155:324705682',
  polygon: 'eip155:137',
  solana: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp',
  'solana-devnet': 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
} as const satisfies Record<NetworkName, `${string}:${string}`>;

export type Caip2Network = (typeof CAIP2_NETWORKS)[NetworkName];

/** The v1 name of a CAIP-2 id, when it is one of these networks. */
export function networkOfCaip2(caip2: string): NetworkName | undefined {
  return NETWORK_NAMES.find((network) => CAIP2_NETWORKS[network] === caip2);
}
