/**
 * Our own table of the networks we pay and get paid on (docs/architecture.md section 4), one row per
 * network: adding a network of a known family is one row here (and its tests). Configuration
 * (NETWORKS, RPC_URL_<NAME>, USDC_ADDRESS_<NAME>), /config, the offers, the dry runs, the limits and
 * the local chains of the devnet read it. Not read from the x402 package at run time (x402@1.2.0 does
 * not know skale-base); its EVM rows follow @x402/evm's table of default assets, which a contract test
 * compares them with. Configuration can override the RPC URL and the asset address of each network.
 */
export type NetworkClass = 'mainnet' | 'testnet';
/** The chain family: which adapter of payments/chains/ serves the network. */
export type ChainType = 'evm' | 'solana';
/** How the asset moves: an EIP-3009 authorization, a Permit2 witness transfer, or an SPL TransferChecked. */
export type TransferMethod = 'eip3009' | 'permit2' | 'spl';

/**
 * When a transaction of the network counts as final, and how long one is watched before a sweep
 * reconciles it against the chain (docs/decisions.md, "What is final when"). The rule is the row's;
 * FINALITY_DEPTH_<NAME> replaces a row's rule by a depth in blocks (the local chains use a small one).
 */
export type FinalityRule = (
  | /** Final once its block is this many blocks deep (its own block counts as one). */ { blocks: number }
  | /** Final once its block is at or below the node's safe or finalized head (EVM block tags). */ {
      head: 'safe' | 'finalized';
    }
  | /** Final once the cluster reports the transaction at this commitment (Solana). */ { commitment: 'finalized' }
) & {
  /** How long a settled transaction is watched before the sweep reconciles it (and a loss is declared). */
  watchSeconds: number;
};

export interface NetworkEntry {
  /**
   * Our name of the network: the one x402 version 1 uses where it has one, else its CAIP-2 id
   * (Arbitrum One is `eip155:42161`). NETWORKS takes either; variables are named after it
   * (RPC_URL_EIP155_42161).
   */
  name: string;
  /** The network's name for people, in messages. */
  label: string;
  chainType: ChainType;
  networkClass: NetworkClass;
  chainId?: number;
  /** The CAIP-2 id x402 version 2 names the network by (docs/architecture.md section 4). */
  caip2: `${string}:${string}`;
  /**
   * The USD stablecoin we are paid and pay in there (the first default asset of @x402/evm's table on
   * an EVM network: USDC on most, USDT0, MegaUSD, mUSD or SBC on some); it counts 1:1 with USDC.
   */
  usdc: string;
  /** Its symbol, in messages. */
  symbol: string;
  /** Its decimals: amounts convert between its atomic units and micro-USDC by them (payments/basics/money.ts). */
  decimals: number;
  /** EIP-712 domain of the token (EVM only). */
  eip712?: { name: string; version: string };
  transferMethod: TransferMethod;
  /** A well-known public JSON-RPC endpoint; absent where there is none: enabling needs RPC_URL_<NAME>. */
  publicRpcUrl?: string;
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
  /** When a transaction here is final, and how long it is watched until then. */
  finality: FinalityRule;
}

/**
 * The rule of the rows taken from @x402/evm's default asset table: final at the node's finalized
 * head, which every one of those chains' nodes serve as the `finalized` block tag (on chains with
 * instant finality it is the latest block), watched for up to an hour.
 */
const EVM_FINALIZED_HEAD = { head: 'finalized', watchSeconds: 3600 } as const satisfies FinalityRule;

const ROWS = [
  {
    name: 'base',
    label: 'Base',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 8453,
    caip2: 'eip155:8453',
    usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://mainnet.base.org',
    explorerTxUrl: 'https://basescan.org/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
    finality: { head: 'finalized', watchSeconds: 3600 },
  },
  {
    name: 'base-sepolia',
    label: 'Base Sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 84532,
    caip2: 'eip155:84532',
    usdc: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://sepolia.base.org',
    explorerTxUrl: 'https://sepolia.basescan.org/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
    finality: { head: 'finalized', watchSeconds: 3600 },
  },
  {
    name: 'skale-base',
    label: 'SKALE Base',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 1187947933,
    caip2: 'eip155:1187947933',
    usdc: '0x85889c8c714505E0c94b30fcfcF64fE3Ac8FCb20',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://skale-base.skalenodes.com/v1/base',
    knownToStandardClients: false,
    enabledByDefault: true,
    finality: { blocks: 1, watchSeconds: 600 },
  },
  {
    name: 'skale-base-sepolia',
    label: 'SKALE Base Sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 324705682,
    caip2: 'eip155:324705682',
    usdc: '0x2e08028E3C4c2356572E096d8EF835cD5C6030bD',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'Bridged USDC (SKALE Bridge)', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://base-sepolia-testnet.skalenodes.com/v1/jubilant-horrible-ancha',
    knownToStandardClients: true,
    enabledByDefault: true,
    finality: { blocks: 1, watchSeconds: 600 },
  },
  {
    name: 'solana',
    label: 'Solana',
    chainType: 'solana',
    networkClass: 'mainnet',
    caip2: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp',
    usdc: 'EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'spl',
    publicRpcUrl: 'https://api.mainnet-beta.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: true,
    finality: { commitment: 'finalized', watchSeconds: 600 },
  },
  {
    name: 'solana-devnet',
    label: 'Solana Devnet',
    chainType: 'solana',
    networkClass: 'testnet',
    caip2: 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1',
    usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
    symbol: 'USDC',
    decimals: 6,
    transferMethod: 'spl',
    publicRpcUrl: 'https://api.devnet.solana.com',
    explorerTxUrl: 'https://explorer.solana.com/tx/{tx}?cluster=devnet',
    knownToStandardClients: true,
    enabledByDefault: true,
    finality: { commitment: 'finalized', watchSeconds: 600 },
  },
  {
    name: 'polygon-amoy',
    label: 'Polygon Amoy',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 80002,
    caip2: 'eip155:80002',
    usdc: '0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc-amoy.polygon.technology',
    knownToStandardClients: true,
    enabledByDefault: false,
    finality: { head: 'finalized', watchSeconds: 1800 },
  },
  {
    name: 'ethereum',
    label: 'Ethereum',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 1,
    caip2: 'eip155:1',
    usdc: '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://ethereum-rpc.publicnode.com',
    explorerTxUrl: 'https://etherscan.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'avalanche',
    label: 'Avalanche C-Chain',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 43114,
    caip2: 'eip155:43114',
    usdc: '0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://api.avax.network/ext/bc/C/rpc',
    explorerTxUrl: 'https://snowtrace.io/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'megaeth',
    label: 'MegaETH',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 4326,
    caip2: 'eip155:4326',
    usdc: '0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7',
    symbol: 'MegaUSD',
    decimals: 18,
    eip712: { name: 'MegaUSD', version: '1' },
    transferMethod: 'permit2',
    publicRpcUrl: 'https://mainnet.megaeth.com/rpc',
    explorerTxUrl: 'https://mega.etherscan.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'monad',
    label: 'Monad',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 143,
    caip2: 'eip155:143',
    usdc: '0x754704Bc059F8C67012fEd69BC8A327a5aafb603',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc.monad.xyz',
    explorerTxUrl: 'https://monadscan.com/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'stable',
    label: 'Stable',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 988,
    caip2: 'eip155:988',
    usdc: '0x779Ded0c9e1022225f8E0630b35a9b54bE713736',
    symbol: 'USDT0',
    decimals: 6,
    eip712: { name: 'USDT0', version: '1' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc.stable.xyz',
    explorerTxUrl: 'https://stablescan.xyz/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'stable-testnet',
    label: 'Stable Testnet',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 2201,
    caip2: 'eip155:2201',
    usdc: '0x78Cf24370174180738C5B8E352B6D14c83a6c9A9',
    symbol: 'USDT0',
    decimals: 6,
    eip712: { name: 'USDT0', version: '1' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc.testnet.stable.xyz',
    explorerTxUrl: 'https://testnet.stablescan.xyz/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'polygon',
    label: 'Polygon',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 137,
    caip2: 'eip155:137',
    usdc: '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://polygon-rpc.com',
    explorerTxUrl: 'https://polygonscan.com/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:42161',
    label: 'Arbitrum One',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 42161,
    caip2: 'eip155:42161',
    usdc: '0xaf88d065e77c8cC2239327C5EDb3A432268e5831',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://arb1.arbitrum.io/rpc',
    explorerTxUrl: 'https://arbiscan.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:421614',
    label: 'Arbitrum Sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 421614,
    caip2: 'eip155:421614',
    usdc: '0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USD Coin', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://sepolia-rollup.arbitrum.io/rpc',
    explorerTxUrl: 'https://sepolia.arbiscan.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:31612',
    label: 'Mezo',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 31612,
    caip2: 'eip155:31612',
    usdc: '0xdD468A1DDc392dcdbEf6db6e34E89AA338F9F186',
    symbol: 'mUSD',
    decimals: 18,
    eip712: { name: 'Mezo USD', version: '1' },
    transferMethod: 'permit2',
    publicRpcUrl: 'https://rpc.mezo.org',
    explorerTxUrl: 'https://explorer.mezo.org/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:31611',
    label: 'Mezo Testnet',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 31611,
    caip2: 'eip155:31611',
    usdc: '0x118917a40FAF1CD7a13dB0Ef56C86De7973Ac503',
    symbol: 'mUSD',
    decimals: 18,
    eip712: { name: 'Mezo USD', version: '1' },
    transferMethod: 'permit2',
    publicRpcUrl: 'https://rpc.test.mezo.org',
    explorerTxUrl: 'https://explorer.test.mezo.org/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:723487',
    label: 'Radius',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 723487,
    caip2: 'eip155:723487',
    usdc: '0x33ad9e4BD16B69B5BFdED37D8B5D9fF9aba014Fb',
    symbol: 'SBC',
    decimals: 6,
    eip712: { name: 'Stable Coin', version: '1' },
    transferMethod: 'permit2',
    explorerTxUrl: 'https://network.radiustech.xyz/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:72344',
    label: 'Radius Testnet',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 72344,
    caip2: 'eip155:72344',
    usdc: '0x33ad9e4BD16B69B5BFdED37D8B5D9fF9aba014Fb',
    symbol: 'SBC',
    decimals: 6,
    eip712: { name: 'Stable Coin', version: '1' },
    transferMethod: 'permit2',
    explorerTxUrl: 'https://testnet.radiustech.xyz/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:36900',
    label: 'ADI Chain',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 36900,
    caip2: 'eip155:36900',
    usdc: '0x9cb8142aEBBcdc60AF7c97Af897A67A8f3CA71C2',
    symbol: 'USDC.e',
    decimals: 6,
    eip712: { name: 'USDC.e', version: '2' },
    transferMethod: 'eip3009',
    explorerTxUrl: 'https://explorer.adifoundation.ai/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:190415',
    label: 'HPP',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 190415,
    caip2: 'eip155:190415',
    usdc: '0x401eCb1D350407f13ba348573E5630B83638E30D',
    symbol: 'USDC.e',
    decimals: 6,
    eip712: { name: 'Bridged USDC', version: '2' },
    transferMethod: 'eip3009',
    explorerTxUrl: 'https://explorer.hpp.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:181228',
    label: 'HPP Sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 181228,
    caip2: 'eip155:181228',
    usdc: '0x401eCb1D350407f13ba348573E5630B83638E30D',
    symbol: 'USDC.e',
    decimals: 6,
    eip712: { name: 'Bridged USDC', version: '2' },
    transferMethod: 'eip3009',
    explorerTxUrl: 'https://sepolia-explorer.hpp.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:50',
    label: 'XDC Network',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 50,
    caip2: 'eip155:50',
    usdc: '0xfA2958CB79b0491CC627c1557F441eF849Ca8eb1',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://rpc.xdcrpc.com',
    explorerTxUrl: 'https://xdcscan.com/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:51',
    label: 'XDC Apothem',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 51,
    caip2: 'eip155:51',
    usdc: '0xb5AB69F7bBada22B28e79C8FFAECe55eF1c771D4',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://erpc.apothem.network',
    explorerTxUrl: 'https://testnet.xdcscan.com/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:38833',
    label: 'Igra',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 38833,
    caip2: 'eip155:38833',
    usdc: '0xA5b8BF902b2844dA17d4506cc827F7F1681735E7',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '1' },
    transferMethod: 'permit2',
    explorerTxUrl: 'https://explorer.igralabs.com/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'flare',
    label: 'Flare',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 14,
    caip2: 'eip155:14',
    usdc: '0xe7cd86e13AC4309349F30B3435a9d337750fC82D',
    symbol: 'USDT0',
    decimals: 6,
    eip712: { name: 'USD\u20AE0', version: '1' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://flare-api.flare.network/ext/C/rpc',
    explorerTxUrl: 'https://flare-explorer.flare.network/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'celo',
    label: 'Celo',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 42220,
    caip2: 'eip155:42220',
    usdc: '0xcebA9300f2b948710d2653dD7B07f33A8B32118C',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://forno.celo.org',
    explorerTxUrl: 'https://celoscan.io/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'eip155:11142220',
    label: 'Celo Sepolia',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 11142220,
    caip2: 'eip155:11142220',
    usdc: '0x01C5C0122039549AD1493B8220cABEdD739BC44E',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://forno.celo-sepolia.celo-testnet.org',
    explorerTxUrl: 'https://celo-sepolia.blockscout.com/tx/{tx}',
    knownToStandardClients: false,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'sei',
    label: 'Sei',
    chainType: 'evm',
    networkClass: 'mainnet',
    chainId: 1329,
    caip2: 'eip155:1329',
    usdc: '0xe15fC38F6D8c56aF07bbCBe3BAf5708A2Bf42392',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://evm-rpc.sei-apis.com',
    explorerTxUrl: 'https://seiscan.io/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
  },
  {
    name: 'sei-testnet',
    label: 'Sei Testnet',
    chainType: 'evm',
    networkClass: 'testnet',
    chainId: 1328,
    caip2: 'eip155:1328',
    usdc: '0x4fCF1784B31630811181f670Aea7A7bEF803eaED',
    symbol: 'USDC',
    decimals: 6,
    eip712: { name: 'USDC', version: '2' },
    transferMethod: 'eip3009',
    publicRpcUrl: 'https://evm-rpc-testnet.sei-apis.com',
    explorerTxUrl: 'https://testnet.seiscan.io/tx/{tx}',
    knownToStandardClients: true,
    enabledByDefault: false,
    finality: EVM_FINALIZED_HEAD,
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

/**
 * The name people and other tools know a network by, where our name is its CAIP-2 id or where it
 * has a second common name: configuration (NETWORKS, RPC_URL_<NAME>, USDC_ADDRESS_<NAME>,
 * FINALITY_DEPTH_<NAME>) accepts it beside our name. Not accepted on the wire: a client names a
 * network as x402 does.
 */
const USUAL_NAMES: Readonly<Record<string, NetworkName>> = {
  arbitrum: 'eip155:42161',
  'arbitrum-one': 'eip155:42161',
  'arbitrum-sepolia': 'eip155:421614',
  mezo: 'eip155:31612',
  'mezo-testnet': 'eip155:31611',
  radius: 'eip155:723487',
  'radius-testnet': 'eip155:72344',
  adi: 'eip155:36900',
  hpp: 'eip155:190415',
  'hpp-sepolia': 'eip155:181228',
  xdc: 'eip155:50',
  'xdc-apothem': 'eip155:51',
  igra: 'eip155:38833',
  'celo-sepolia': 'eip155:11142220',
  'avalanche-c-chain': 'avalanche',
  'ethereum-mainnet': 'ethereum',
  'polygon-pos': 'polygon',
};

/** The usual names configuration accepts for a network beside ours (arbitrum-sepolia for eip155:421614). */
export function usualNamesOf(network: NetworkName): string[] {
  return Object.keys(USUAL_NAMES).filter((alias) => USUAL_NAMES[alias] === network);
}

/** A network named in configuration: by our name, an alias, its usual name or its CAIP-2 id. */
export function configuredNetwork(name: string): NetworkName | undefined {
  return canonicalNetwork(name) ?? (Object.hasOwn(USUAL_NAMES, name) ? USUAL_NAMES[name] : undefined);
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
