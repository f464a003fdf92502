/**
 * Our own table of the networks we pay and get paid on (docs/architecture.md section 4), one row per
 * network: adding a network of a known family is one row here (and its tests). Configuration
 * (NETWORKS, RPC_URL_<NAME>, USDC_ADDRESS_<NAME>), /config, the offers, the dry runs, the limits and
 * the local chains of the devnet read it. Not read from the x402 package: x402@1.2.0 does not know
 * skale-base. Configuration can override the RPC URL and the asset address of each network.
 */
export type NetworkClass = 'mainnet' | 'testnet';
/** The chain family: which adapter of payments/chains/ serves the network. */
export type ChainType = 'evm' | 'solana';
/** How the asset moves: an EIP-3009 authorization, a Permit2 witness transfer, or an SPL TransferChecked. */
export type TransferMethod = 'eip3009' | 'permit2' | 'spl';

export interface NetworkEntry {
  /** Our name of the network, the one x402 version 1 uses. */
  name: string;
  chainType: ChainType;
  networkClass: NetworkClass;
  chainId?: number;
  /** The CAIP-2 id x402 version 2 names the network by (docs/architecture.md section 4). */
  caip2: `${string}:${string}`;
  /** The USD stablecoin we are paid and pay in there (USDC, or the network's own: MegaUSD on MegaETH). */
  usdc: string;
  /** Its decimals: amounts convert between its atomic units and micro-USDC by them (payments/money.ts). */
  decimals: number;
  /** EIP-712 domain of the token (EVM only). */
  eip712?: { name: string; version: string };
  transferMethod: TransferMethod;
  publicRpcUrl: string;
  /** The public explorer's page of a transaction, `{tx}` standing for its hash; absent where we know none. */
  explorerTxUrl?: string;
  /**
   * Whether standard x402 v1 clients know this network. They reject a whole 402 when one entry names
   * a network they do not know (x402@1.2.0 does not know skale-base), so such a network is offered
   * only when the client names it.
   */
  knownToStandardClients: boolean;
  /** Enabled when NETWORKS is not set. */
  enabledByDefault: boolean;
}

const ROWS = [
  {
    name: 'base',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 8453,
    caip2: 'eip155:8453',
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://mainnet.base.org',
    explorerTxUrl: 'https://basescan.org/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
  },
  {
    name: 'base-sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 84532,
    caip2: 'eip155:84532',
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://sepolia.base.org',
    explorerTxUrl: 'https://sepolia.basescan.org/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
  },
  {
    name: 'skale-base',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 1187947933,
    caip2: 'eip155:1187947933',
    usdc: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
    decimals: 6,
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://skale-base.skalenodes.com/v1/base',
    knownToStandardClients: false,
    enabledByDefault: true,
  },
  {
    name: 'skale-base-sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 324705682,
    caip2: 'eip155:324705682',
    usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD',
    decimals: 6,
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://base-sepolia-testnet.skalenodes.com/v1/jubilant-horrible-ancha',
    knownToStandardClients: true,
    enabledByDefault: true,
  },
  {
    name: 'solana',
    chainType: 'solana',
    networkClass: 'mainnet',
    caip2: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp',
    usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v',
    decimals: 6,
    transferMethod: 'spl',
    publicRpcUrl: 'https://api.mainnet-beta.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
  },
  {
    name: 'solana-devnet',
    chainType: 'solana',
    networkClass: 'testnet',
    caip2: 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
    usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
    decimals: 6,
    transferMethod: 'spl',
    publicRpcUrl: 'https://api.devnet.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}?cluster=devnet',
    knownToStandardClients: true,
    enabledByDefault: true,
  },
  {
    name: 'polygon-amoy',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 80002,
    caip2: 'eip155:80002',
    usdc: '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc-amoy.polygon.technology',
    knownToStandardClients: true,
    enabledByDefault: false,
  },
  // From @x402/evm's table of default assets (eip155:4326): MegaUSD, 18 decimals, no EIP-3009; it
  // moves only through Permit2 (`assetTransferMethod: "permit2"`). Paid on, not received on.
  {
    name: 'megaeth',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 4326,
    caip2: 'eip155:4326',
    usdc: '0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7',
    decimals: 18,
    eip712: { name: 'MegaUSD', version: '1' },
    transferMethod: 'permit2',
    publicRpcUrl: 'https://mainnet.megaeth.com/rpc',
    knownToStandardClients: false,
    enabledByDefault: false,
  },
] as const satisfies readonly NetworkEntry[];

export type NetworkName = (typeof ROWS)[number]['name'];

/** Every network we know, in the table's order (the order of our offers). */
export const NETWORK_NAMES: readonly NetworkName[] = ROWS.map((row) => row.name);
/** The networks enabled when NETWORKS is not set. */
export const DEFAULT_NETWORK_NAMES: readonly NetworkName[] = ROWS.filter((row) => row.enabledByDefault).map(
  (row) => row.name,
);

export const NETWORK_TABLE = Object.fromEntries(ROWS.map((row) => [row.name, row as NetworkEntry])) as Record<
  NetworkName,
  NetworkEntry
>;

/** What configuration knows of each family: how its addresses look and which variable holds our key. */
export const CHAIN_FAMILIES: Record<
  ChainType,
  { addressPattern: RegExp; keyVariable: string; keySetting: 'evmPrivateKey' | 'solanaPrivateKey'; enabledText: string }
> = {
  evm: {
    addressPattern: /^0x[0-9a-fA-F]{40}$/,
    keyVariable: 'EVM_PRIVATE_KEY',
    keySetting: 'evmPrivateKey',
    enabledText: 'an EVM network',
  },
  solana: {
    addressPattern: /^[1-9A-HJ-NP-Za-km-z]{32,44}$/,
    keyVariable: 'SOLANA_PRIVATE_KEY',
    keySetting: 'solanaPrivateKey',
    enabledText: 'a Solana network',
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
