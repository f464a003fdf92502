// The options of startPeers and the Peers it returns.
import type { Address, Hex, LocalAccount, WalletClient } from 'viem';
import type { LocalEvmChain } from '../evm/chain.js';
import type { AuthorizationOverrides, SignedEvmPayment } from '../evm/authorization.js';
import type { FacilitatorCall } from '../facilitator/server.js';
import type { EvmNetworkName, NetworkName, SolanaNetworkName } from '../networks.js';
import type { SolanaKey } from '../svm/keys.js';
import type { SolanaLedger } from '../svm/ledger.js';
import type { SignedSolanaPayment, SolanaPaymentOverrides } from '../svm/payment-client.js';
import type { FacilitatorV2Call, PendingFacilitator } from '../facilitator/v2.js';
import type { PaymentLayerName, X402Version } from '../targets/payment.js';
import type { V2Extensions, V2OfferKind } from '../targets/payment-v2.js';
import type { RouteName } from '../targets/routes.js';
import type { RouteSettings, Target } from '../targets/target.js';
import type { PaymentRequirements } from '../x402.js';

export interface TargetOptions {
  name: string;
  network: NetworkName;
  /** Default 1 (x402-express 1.2.0 or our own layer); 2 puts the paid routes behind @x402/express 2.27 and the v2 facilitator. */
  x402Version?: X402Version;
  /** Default: the harness's target wallet on that kind of chain. */
  payTo?: string;
  paymentLayer?: PaymentLayerName;
  /** Version 2 only: exact through Permit2, upto, or batch-settlement (devnet/targets/payment-v2.ts); default exact by the network's transfer method. */
  v2Offer?: V2OfferKind;
  /**
   * Solana: whether the payTo of each paid route gets its USDC account before the target starts
   * (default true). False leaves a payTo without a token account for the mint, as a fresh wallet is.
   */
  openPayToAccounts?: boolean;
  /** Solana: the mint the paid routes ask to be paid in instead of the cluster's USDC (a token nobody holds here). */
  solanaMint?: string;
  /** Prices of this target's routes in micro-USDC (null: free); over startPeers' pricesMicroUsdc. */
  pricesMicroUsdc?: Partial<Record<RouteName, bigint | null>>;
  /** Per-route payTo or network, when one route differs from the rest of its target. */
  routes?: Partial<Record<RouteName, Partial<Omit<RouteSettings, 'priceMicroUsdc'>>>>;
  slowDelayMs?: number;
  errorStatus?: number;
  holdTimeoutMs?: number;
  /** Version 2 only: the x402 extensions its paid routes declare (devnet/targets/payment-v2.ts). */
  v2Extensions?: V2Extensions;
  /**
   * Version 2 only: settles through the pending facilitator (Peers.facilitatorV2.pending), so a
   * paid call is answered as @x402/express answers a settlement still under way (402 with
   * PAYMENT-RESPONSE `settlement_pending` and the transaction), which lands once released.
   */
  settlementPending?: boolean;
}

export interface StartPeersOptions {
  /**
   * Networks to bring up; default all six. Targets default to one x402 version 1 target per
   * network, named after it, and one version 2 target per network, named `v2-<network>`.
   */
  networks?: NetworkName[];
  /** Whether the default targets include the version 2 ones (`v2-<network>`); default true. Ignored with `targets`. */
  v2Targets?: boolean;
  /** Route prices in micro-USDC (null: free) for every target; defaults in DEFAULT_PRICES_MICRO_USDC. */
  pricesMicroUsdc?: Partial<Record<RouteName, bigint | null>>;
  targets?: TargetOptions[];
  slowDelayMs?: number;
  holdTimeoutMs?: number;
  /** How long the pending facilitator holds a settlement before it sends it; default 1 s. */
  pendingSettlementReleaseMs?: number;
  funding?: {
    /** USDC of the service wallet on every network; default 1,000 USDC. */
    serviceMicroUsdc?: bigint;
    /** USDC of the client wallet on every network; default 100 USDC. */
    clientMicroUsdc?: bigint;
  };
  /** Fixed keys instead of fresh ones (the sandbox may want to print or reuse them). */
  keys?: {
    serviceEvmPrivateKey?: Hex;
    clientEvmPrivateKey?: Hex;
    serviceSolanaSecretKey?: Uint8Array;
    clientSolanaSecretKey?: Uint8Array;
  };
}

export interface EvmWallet {
  privateKey: Hex;
  address: Address;
  account: LocalAccount;
}

export interface PeerWallets {
  /** Pays targets and gas, receives relay payments: USDC and ETH on every EVM network, USDC and SOL on Solana. */
  service: { evm: EvmWallet; solana: SolanaKey };
  /** A paying client: USDC everywhere, no ETH and no SOL (x402 payments are gasless for the payer). */
  client: { evm: EvmWallet; solana: SolanaKey };
  /** Default payTo of the targets (USDC accounts exist on both clusters). */
  target: { evm: EvmWallet; solana: SolanaKey };
}

export interface Peers {
  networks: NetworkName[];
  evmNetworks: EvmNetworkName[];
  solanaNetworks: SolanaNetworkName[];
  /** JSON-RPC URL per running network. */
  rpcUrls: Partial<Record<NetworkName, string>>;
  facilitator: { url: string; solanaFeePayer: string; evmAddress: Address; calls: FacilitatorCall[] };
  /**
   * The x402 version 2 facilitator (@x402/core's x402Facilitator with @x402/evm's and @x402/svm's
   * exact schemes): GET /supported lists a v2 kind (CAIP-2) for every running network and v1 kinds
   * where @x402/evm or @x402/svm knows the v1 name (not skale-base); the Solana kinds carry
   * `extra.feePayer`. POST /verify and POST /settle take both versions. Its own EVM key pays the gas;
   * its own Solana key (`solanaFeePayer`, 100 SOL on each cluster) co-signs and pays the fees.
   */
  facilitatorV2: {
    url: string;
    evmAddress: Address;
    solanaFeePayer: string;
    calls: FacilitatorV2Call[];
    /**
     * The same facilitator under `/pending` with its own key, whose EVM settlements are held and
     * answered `settlement_pending`: sent when `held.release()` is called, or on their own after
     * `pendingSettlementReleaseMs`. Targets with `settlementPending` settle through it.
     */
    pending: PendingFacilitator;
  };
  targets: Record<string, Target>;
  wallets: PeerWallets;
  evmChains: Partial<Record<EvmNetworkName, LocalEvmChain>>;
  solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>>;
  /** Milliseconds from the call of startPeers until everything answered. */
  startupMs: number;

  /**
   * The stablecoin an owner holds, in its atomic units: micro-USDC for USDC, 10^-18 for MegaETH's
   * MegaUSD (on Solana: of the owner's associated token account, 0 when missing).
   */
  usdcBalance(network: NetworkName, owner: string): Promise<bigint>;
  /** Wei on EVM networks, lamports on Solana. */
  nativeBalance(network: NetworkName, owner: string): Promise<bigint>;
  /** Mints the network's stablecoin worth `amountMicroUsdc` (scaled up by its decimals). */
  mint(network: NetworkName, owner: string, amountMicroUsdc: bigint): Promise<void>;
  /** Creates the owner's associated USDC account on a cluster (idempotent); returns its address. */
  createUsdcAccount(network: SolanaNetworkName, owner: string): Promise<string>;
  evmWalletClient(network: EvmNetworkName, privateKey?: Hex): WalletClient;
  /**
   * Unmodified x402-fetch 1.2.0 paying as the client (or the given key). EVM: a viem wallet
   * client on the local chain (x402-fetch picks the network from its chain id). Solana: a kit
   * signer with the cluster's local RPC URL. x402 1.2.0 does not know skale-base.
   */
  x402Fetch(
    network: NetworkName,
    options?: { privateKey?: Hex; secretKey?: Uint8Array; maxValueMicroUsdc?: bigint },
  ): typeof fetch;
  /**
   * Unmodified @x402/fetch 2.27 with @x402/evm's exact scheme, paying as the client (or the given
   * key) on any EVM network: a pure x402 version 2 client (`eip155:*`), or with `v1Names` one that
   * also answers version 1 402s under the v1 names @x402/evm knows (not skale-base). With `solana`,
   * also @x402/svm's exact scheme on every started cluster (CAIP-2, and the v1 names with
   * `v1Names`), paying as the client's Solana key (or `secretKey`) through the local RPC. Every
   * local network's stablecoin is allowed, up to maxValueMicroUsdc (default 0.1 USDC) per payment.
   * With `upto`, @x402/evm's upto scheme too.
   */
  x402FetchV2(options?: {
    privateKey?: Hex;
    v1Names?: boolean;
    maxValueMicroUsdc?: bigint;
    upto?: boolean;
    solana?: boolean;
    secretKey?: Uint8Array;
  }): typeof fetch;
  /** Our own Solana payer as a fetch wrapper (works on both clusters). */
  solanaFetch(options?: { secretKey?: Uint8Array; maxAmountMicroUsdc?: bigint }): Promise<typeof fetch>;
  signEvmPayment(
    requirements: PaymentRequirements,
    overrides?: AuthorizationOverrides,
    privateKey?: Hex,
  ): Promise<SignedEvmPayment>;
  createSolanaPayment(
    requirements: PaymentRequirements,
    overrides?: SolanaPaymentOverrides,
    secretKey?: Uint8Array,
  ): Promise<SignedSolanaPayment>;
  stop(): Promise<void>;
}
