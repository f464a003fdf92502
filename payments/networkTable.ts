/**
 * Our own table of the networks we pay and get paid on (docs/architecture.md section 4). Not read from the
 * x402 package: x402@1.2.0 does not know skale-base. Configuration can override the RPC URL and
 * the USDC address of each network.
 */
export const NETWORK_NAMES = [
  'base',
  'base-sepolia',
  'skale-base',
  'skale-base-sepolia',
  'solana',
  'solana-devnet',
] as const;

export type NetworkName = (typeof NETWORK_NAMES)[number];
export type NetworkClass = 'mainnet' | 'testnet';
export type ChainType = 'evm' | 'solana';

export interface NetworkEntry {
  chainType: ChainType;
  networkClass: NetworkClass;
  chainId?: number;
  /** The CAIP-2 id x402 version 2 names the network by (docs/architecture.md section 4). */
  caip2: `${string}:${string}`;
  usdc: string;
  /** EIP-712 domain of the USDC contract (EVM only). */
  eip712?: { name: string; version: string };
  publicRpcUrl: string;
  /** The public explorer's page of a transaction, `{tx}` standing for its hash; absent where we know none. */
  explorerTxUrl?: string;
  /**
   * Whether standard x402 v1 clients know this network. They reject a whole 402 when one entry names
   * a network they do not know (x402@1.2.0 does not know skale-base), so such a network is offered
   * only when the client names it.
   */
  knownToStandardClients: boolean;
}

export const NETWORK_TABLE: Record<NetworkName, NetworkEntry> = {
  base: {
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 8453,
    caip2: 'eip155:8453',
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    eip712: { name: 'USD Coin', version: '2' },
    publicRpcUrl: 'https://mainnet.base.org',
    explorerTxUrl: 'https://basescan.org/tx/{tx}',
    knownToStandardClients: true,
  },
  'base-sepolia': {
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 84532,
    caip2: 'eip155:84532',
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    eip712: { name: 'USDC', version: '2' },
    publicRpcUrl: 'https://sepolia.base.org',
    explorerTxUrl: 'https://sepolia.basescan.org/tx/{tx}',
    knownToStandardClients: true,
  },
  'skale-base': {
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 1187947933,
    caip2: 'eip155:1187947933',
    usdc: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    publicRpcUrl: 'https://skale-base.skalenodes.com/v1/base',
    knownToStandardClients: false,
  },
  'skale-base-sepolia': {
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 324705682,
    caip2: 'eip155:324705682',
    usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD',
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    publicRpcUrl: 'https://base-sepolia-testnet.skalenodes.com/v1/jubilant-horrible-ancha',
    knownToStandardClients: true,
  },
  solana: {
    chainType: 'solana',
    networkClass: 'mainnet',
    caip2: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp',
    usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v',
    publicRpcUrl: 'https://api.mainnet-beta.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}',
    knownToStandardClients: true,
  },
  'solana-devnet': {
    chainType: 'solana',
    networkClass: 'testnet',
    caip2: 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
    usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
    publicRpcUrl: 'https://api.devnet.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}?cluster=devnet',
    knownToStandardClients: true,
  },
};

/** Names clients may use for a network; the Solana mainnet has three. */
const ALIASES: Record<string, NetworkName> = {
  'solana-mainnet': 'solana',
  'solana-mainnet-beta': 'solana',
};

/** The other names a network is accepted by (solana: solana-mainnet, solana-mainnet-beta). */
export function aliasesOf(network: NetworkName): string[] {
  return Object.keys(ALIASES).filter((alias) => ALIASES[alias] === network);
}

const BY_CAIP2 = new Map<string, NetworkName>(NETWORK_NAMES.map((name) => [NETWORK_TABLE[name].caip2, name]));

/** Our name of a network given by its v1 name, an alias, or its CAIP-2 id (x402 version 2). */
export function canonicalNetwork(name: string): NetworkName | undefined {
  if ((NETWORK_NAMES as readonly string[]).includes(name)) return name as NetworkName;
  return ALIASES[name] ?? BY_CAIP2.get(name);
}

/** The network's CAIP-2 id, as x402 version 2 writes it. */
export function caip2Of(network: NetworkName): `${string}:${string}` {
  return NETWORK_TABLE[network].caip2;
}
