// The networks the local peers imitate: real chain ids, canonical USDC addresses and EIP-712
// domains (docs/architecture.md section 4). The harness keeps its own copy of this table on purpose: it is
// the independent reference that the service's own table is tested against. Beside the six networks
// of the interface, three are started only when asked for (`optIn`): Polygon and Polygon Amoy (USDC, EIP-3009) and
// MegaETH, whose stablecoin (MegaUSD, 18 decimals) moves only through Permit2, both as @x402/evm's
// table of default assets describes them.
import type { Address } from 'viem';

/** How the network's stablecoin is paid in x402: an EIP-3009 authorization, or a Permit2 witness transfer. */
export type EvmTransferMethod = 'eip3009' | 'permit2';

export interface EvmNetworkRow {
  chainId: number;
  /** The network's USD stablecoin (USDC on every network but MegaETH). */
  usdc: Address;
  eip712: { name: string; version: string };
  class: 'mainnet' | 'testnet';
  symbol: string;
  decimals: number;
  transferMethod: EvmTransferMethod;
  /** Started only when named (startPeers' `networks`), never by default. */
  optIn?: boolean;
}

export const EVM_NETWORKS = {
  base: {
    chainId: 8453,
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    eip712: { name: 'USD Coin', version: '2' },
    class: 'mainnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
  },
  'base-sepolia': {
    chainId: 84532,
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    eip712: { name: 'USDC', version: '2' },
    class: 'testnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
  },
  'skale-base': {
    chainId: 1187947933,
    usdc: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    class: 'mainnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
  },
  'skale-base-sepolia': {
    chainId: 324705682,
    usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    class: 'testnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
  },
  polygon: {
    chainId: 137,
    usdc: '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359',
    eip712: { name: 'USD Coin', version: '2' },
    class: 'mainnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
    optIn: true,
  },
  'polygon-amoy': {
    chainId: 80002,
    usdc: '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582',
    eip712: { name: 'USDC', version: '2' },
    class: 'testnet',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'eip3009',
    optIn: true,
  },
  megaeth: {
    chainId: 4326,
    usdc: '0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7',
    eip712: { name: 'MegaUSD', version: '1' },
    class: 'mainnet',
    symbol: 'MegaUSD',
    decimals: 18,
    transferMethod: 'permit2',
    optIn: true,
  },
} as const satisfies Record<string, EvmNetworkRow>;

export const SOLANA_NETWORKS = {
  solana: { usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v', class: 'mainnet' },
  'solana-devnet': { usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU', class: 'testnet' },
} as const;

export type EvmNetworkName = keyof typeof EVM_NETWORKS;
export type SolanaNetworkName = keyof typeof SOLANA_NETWORKS;
export type NetworkName = EvmNetworkName | SolanaNetworkName;

/** Every EVM network the peers can start, opt-in ones included. */
export const ALL_EVM_NETWORK_NAMES = Object.keys(EVM_NETWORKS) as EvmNetworkName[];
/** The EVM networks started by default: those of the interface. */
export const EVM_NETWORK_NAMES = ALL_EVM_NETWORK_NAMES.filter(
  (network) => !(EVM_NETWORKS[network] as EvmNetworkRow).optIn,
);
/** The networks started only when named. */
export const OPT_IN_NETWORK_NAMES = ALL_EVM_NETWORK_NAMES.filter(
  (network) => (EVM_NETWORKS[network] as EvmNetworkRow).optIn === true,
);
export const SOLANA_NETWORK_NAMES = Object.keys(SOLANA_NETWORKS) as SolanaNetworkName[];
/** The networks startPeers starts when none are named. */
export const NETWORK_NAMES: NetworkName[] = [...EVM_NETWORK_NAMES, ...SOLANA_NETWORK_NAMES];

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
  'polygon-amoy': 'eip155:80002',
  megaeth: 'eip155:4326',
  solana: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp',
  'solana-devnet': 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
} as const satisfies Record<NetworkName, `${string}:${string}`>;

export type Caip2Network = (typeof CAIP2_NETWORKS)[NetworkName];

/** The v1 name of a CAIP-2 id, when it is one of these networks. */
export function networkOfCaip2(caip2: string): NetworkName | undefined {
  return [...ALL_EVM_NETWORK_NAMES, ...SOLANA_NETWORK_NAMES].find((network) => CAIP2_NETWORKS[network] === caip2);
}

/**
 * A price in micro-USDC as atomic units of the network's stablecoin (USD stablecoins count 1:1):
 * scaled up for an asset with more than 6 decimals (MegaUSD has 18).
 */
export function atomicAmount(network: NetworkName, microUsdc: bigint): bigint {
  const decimals = isEvmNetwork(network) ? EVM_NETWORKS[network].decimals : USDC_DECIMALS;
  if (decimals < USDC_DECIMALS) throw new RangeError(`${network}: an asset with under 6 decimals is not served`);
  return microUsdc * 10n ** BigInt(decimals - USDC_DECIMALS);
}
