// startPeers() brings up every real peer the service talks to, on 127.0.0.1 only: a local EVM chain
// per chosen EVM network (real chain id, USDC at the canonical address), a litesvm ledger per
// Solana cluster behind its own JSON-RPC endpoint, a facilitator, and x402-protected targets. It
// depends on nothing from vitest: the service's sandbox mode starts it from a plain tsx process.
import {
  createWalletClient,
  type Address,
  type Hex,
  type LocalAccount,
  type WalletClient,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { Address as SolanaAddress, KeyPairSigner } from '@solana/kit';
import { wrapFetchWithPayment } from 'x402-fetch';
import { startEvmChain, localTransport, type LocalEvmChain } from './evm/chain.js';
import { signEvmPayment, type AuthorizationOverrides, type SignedEvmPayment } from './evm/authorization.js';
import { installUsdc, type LocalUsdc } from './evm/usdc.js';
import { createEvmFacilitator } from './facilitator/evm.js';
import { startFacilitator, type FacilitatorCall } from './facilitator/server.js';
import { createSvmFacilitator } from './facilitator/svm.js';
import { KeyedQueue } from './key-queue.js';
import {
  EVM_NETWORK_NAMES,
  NETWORK_NAMES,
  isEvmNetwork,
  isSolanaNetwork,
  type EvmNetworkName,
  type NetworkName,
  type SolanaNetworkName,
} from './networks.js';
import { generateSolanaKey, solanaKeyFromSecret, type SolanaKey } from './svm/keys.js';
import { SolanaLedger } from './svm/ledger.js';
import {
  createSolanaPayment,
  wrapFetchWithSolanaPayment,
  type SignedSolanaPayment,
  type SolanaPaymentOverrides,
} from './svm/payment-client.js';
import { startSolanaRpcServer, type SolanaRpcServer } from './svm/rpc-server.js';
import type { PaymentLayerName } from './targets/payment.js';
import { DEFAULT_PRICES_MICRO_USDC, ROUTE_NAMES, type RouteName } from './targets/routes.js';
import { startTarget, type RouteSettings, type Target } from './targets/target.js';
import type { PaymentRequirements } from './x402.js';

export * from './networks.js';
export * from './x402.js';
export { ROUTE_NAMES, ROUTE_PATHS, DEFAULT_PRICES_MICRO_USDC, type RouteName, type EchoedRequest } from './targets/routes.js';
export type { Target, RecordedRequest, RouteSettings } from './targets/target.js';
export type { FacilitatorCall } from './facilitator/server.js';
export type { SolanaKey } from './svm/keys.js';
export type { AuthorizationOverrides, SignedEvmPayment } from './evm/authorization.js';
export type { SolanaPaymentOverrides, SignedSolanaPayment } from './svm/payment-client.js';

const WEI_PER_ETH = 10n ** 18n;
const LAMPORTS_PER_SOL = 1_000_000_000n;
const MICRO_USDC_PER_USDC = 1_000_000n;

export interface TargetOptions {
  name: string;
  network: NetworkName;
  /** Default: the harness's target wallet on that kind of chain. */
  payTo?: string;
  paymentLayer?: PaymentLayerName;
  /** Prices of this target's routes in micro-USDC (null: free); over startPeers' pricesMicroUsdc. */
  pricesMicroUsdc?: Partial<Record<RouteName, bigint | null>>;
  /** Per-route payTo or network, when one route differs from the rest of its target. */
  routes?: Partial<Record<RouteName, Partial<Omit<RouteSettings, 'priceMicroUsdc'>>>>;
  slowDelayMs?: number;
  errorStatus?: number;
  holdTimeoutMs?: number;
}

export interface StartPeersOptions {
  /** Networks to bring up; default all six. Targets default to one per network, named after it. */
  networks?: NetworkName[];
  /** Route prices in micro-USDC (null: free) for every target; defaults in DEFAULT_PRICES_MICRO_USDC. */
  pricesMicroUsdc?: Partial<Record<RouteName, bigint | null>>;
  targets?: TargetOptions[];
  slowDelayMs?: number;
  holdTimeoutMs?: number;
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
  targets: Record<string, Target>;
  wallets: PeerWallets;
  evmChains: Partial<Record<EvmNetworkName, LocalEvmChain>>;
  solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>>;
  /** Milliseconds from the call of startPeers until everything answered. */
  startupMs: number;

  /** USDC of an owner in micro-USDC (on Solana: of the owner's associated token account, 0 when missing). */
  usdcBalance(network: NetworkName, owner: string): Promise<bigint>;
  /** Wei on EVM networks, lamports on Solana. */
  nativeBalance(network: NetworkName, owner: string): Promise<bigint>;
  mint(network: NetworkName, owner: string, amountMicroUsdc: bigint): Promise<void>;
  /** Creates the owner's associated USDC account on a cluster (idempotent); returns its address. */
  createUsdcAccount(network: SolanaNetworkName, owner: string): Promise<string>;
  evmWalletClient(network: EvmNetworkName, privateKey?: Hex): WalletClient;
  /**
   * Unmodified x402-fetch 1.2.0 paying as the client (or the given key). EVM: a viem wallet
   * client on the local chain (x402-fetch picks the network from its chain id). Solana: a kit
   * signer with the cluster's local RPC URL. x402 1.2.0 does not know skale-base.
   */
  x402Fetch(network: NetworkName, options?: { privateKey?: Hex; secretKey?: Uint8Array; maxValueMicroUsdc?: bigint }): typeof fetch;
  /** Our own Solana payer as a fetch wrapper (works on both clusters). */
  solanaFetch(options?: { secretKey?: Uint8Array; maxAmountMicroUsdc?: bigint }): Promise<typeof fetch>;
  signEvmPayment(requirements: PaymentRequirements, overrides?: AuthorizationOverrides, privateKey?: Hex): Promise<SignedEvmPayment>;
  createSolanaPayment(
    requirements: PaymentRequirements,
    overrides?: SolanaPaymentOverrides,
    secretKey?: Uint8Array,
  ): Promise<SignedSolanaPayment>;
  stop(): Promise<void>;
}

function evmWallet(privateKey: Hex = generatePrivateKey()): EvmWallet {
  const account = privateKeyToAccount(privateKey);
  return { privateKey, address: account.address, account };
}

export async function startPeers(options: StartPeersOptions = {}): Promise<Peers> {
  const startedAt = performance.now();
  const networks = [...new Set(options.networks ?? NETWORK_NAMES)];
  const evmNetworks = networks.filter(isEvmNetwork);
  const solanaNetworks = networks.filter(isSolanaNetwork);
  const serviceMicroUsdc = options.funding?.serviceMicroUsdc ?? 1_000n * MICRO_USDC_PER_USDC;
  const clientMicroUsdc = options.funding?.clientMicroUsdc ?? 100n * MICRO_USDC_PER_USDC;
  const queue = new KeyedQueue();
  const stoppers: Array<() => Promise<void>> = [];
  const stop = async () => {
    const pending = stoppers.splice(0).reverse();
    await Promise.allSettled(pending.map((close) => close()));
  };

  const solanaKey = (secret?: Uint8Array) => (secret ? solanaKeyFromSecret(secret) : generateSolanaKey());
  const [serviceSolana, clientSolana, targetSolana, feePayer, mintAuthority] = await Promise.all([
    solanaKey(options.keys?.serviceSolanaSecretKey),
    solanaKey(options.keys?.clientSolanaSecretKey),
    generateSolanaKey(),
    generateSolanaKey(),
    generateSolanaKey(),
  ]);
  const wallets: PeerWallets = {
    service: { evm: evmWallet(options.keys?.serviceEvmPrivateKey), solana: serviceSolana },
    client: { evm: evmWallet(options.keys?.clientEvmPrivateKey), solana: clientSolana },
    target: { evm: evmWallet(), solana: targetSolana },
  };
  const minter = evmWallet();
  const facilitatorEvm = evmWallet();

  try {
    const evmChains: Partial<Record<EvmNetworkName, LocalEvmChain>> = {};
    const usdcContracts: Partial<Record<EvmNetworkName, LocalUsdc>> = {};
    const solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>> = {};
    const rpcServers: Partial<Record<SolanaNetworkName, SolanaRpcServer>> = {};

    const startEvm = async (network: EvmNetworkName) => {
      const gas = 1_000n * WEI_PER_ETH;
      const chain = await startEvmChain(network, [
        { privateKey: minter.privateKey, balanceWei: gas },
        { privateKey: facilitatorEvm.privateKey, balanceWei: gas },
        { privateKey: wallets.service.evm.privateKey, balanceWei: gas },
      ]);
      stoppers.push(chain.close);
      evmChains[network] = chain;
      const usdc = await installUsdc(chain, minter.account, queue);
      usdcContracts[network] = usdc;
      // The token refuses to mint nothing, as FiatToken does.
      if (serviceMicroUsdc > 0n) await usdc.mint(wallets.service.evm.address, serviceMicroUsdc);
      if (clientMicroUsdc > 0n) await usdc.mint(wallets.client.evm.address, clientMicroUsdc);
    };

    const startSolana = async (network: SolanaNetworkName) => {
      const ledger = new SolanaLedger(network, mintAuthority.signer);
      solanaLedgers[network] = ledger;
      ledger.airdrop(feePayer.address, 100n * LAMPORTS_PER_SOL);
      ledger.airdrop(wallets.service.solana.address, 100n * LAMPORTS_PER_SOL);
      await ledger.mintUsdc(wallets.service.solana.address, serviceMicroUsdc);
      await ledger.mintUsdc(wallets.client.solana.address, clientMicroUsdc);
      await ledger.createUsdcAccount(wallets.target.solana.address);
      const server = await startSolanaRpcServer(ledger);
      stoppers.push(server.close);
      rpcServers[network] = server;
    };

    await Promise.all([...evmNetworks.map(startEvm), ...solanaNetworks.map(startSolana)]);

    const rpcUrls: Partial<Record<NetworkName, string>> = {};
    for (const network of evmNetworks) rpcUrls[network] = evmChains[network]!.rpcUrl;
    for (const network of solanaNetworks) rpcUrls[network] = rpcServers[network]!.url;

    const facilitatorServer = await startFacilitator({
      evm: createEvmFacilitator(new Map(evmNetworks.map((network) => [network, evmChains[network]!])), facilitatorEvm.account, queue),
      svm: createSvmFacilitator(
        new Map(solanaNetworks.map((network) => [network, rpcServers[network]!.url])),
        feePayer.signer,
        queue,
      ),
      evmNetworks,
      solanaNetworks,
    });
    stoppers.push(facilitatorServer.close);

    const defaultPayTo = (network: NetworkName) =>
      isEvmNetwork(network) ? wallets.target.evm.address : wallets.target.solana.address;
    const targetOptions = options.targets ?? networks.map((network): TargetOptions => ({ name: network, network }));
    const targets: Record<string, Target> = {};
    for (const target of targetOptions) {
      if (!networks.includes(target.network)) throw new Error(`target ${target.name}: network ${target.network} is not started`);
      if (targets[target.name]) throw new Error(`two targets are named ${target.name}`);
      const prices = { ...DEFAULT_PRICES_MICRO_USDC, ...options.pricesMicroUsdc, ...target.pricesMicroUsdc };
      const routes = {} as Record<RouteName, RouteSettings>;
      for (const route of ROUTE_NAMES) {
        const network = target.routes?.[route]?.network ?? target.network;
        if (!networks.includes(network)) throw new Error(`target ${target.name}, route ${route}: network ${network} is not started`);
        const payTo = target.routes?.[route]?.payTo ?? (network === target.network ? target.payTo : undefined) ?? defaultPayTo(network);
        routes[route] = { priceMicroUsdc: prices[route], network, payTo };
      }
      const started = await startTarget(
        {
          name: target.name,
          network: target.network,
          payTo: target.payTo ?? defaultPayTo(target.network),
          paymentLayer: target.paymentLayer,
          routes,
          slowDelayMs: target.slowDelayMs ?? options.slowDelayMs,
          errorStatus: target.errorStatus,
          holdTimeoutMs: target.holdTimeoutMs ?? options.holdTimeoutMs,
        },
        facilitatorServer.url,
        facilitatorServer.solanaFeePayer,
      );
      stoppers.push(started.close);
      targets[target.name] = started;
    }
    // A payTo on Solana must hold a USDC account before anyone is asked to pay into it.
    await Promise.all(
      Object.values(targets).flatMap((target) =>
        Object.values(target.routes)
          .filter((route) => isSolanaNetwork(route.network))
          .map((route) => solanaLedgers[route.network as SolanaNetworkName]!.createUsdcAccount(route.payTo as SolanaAddress)),
      ),
    );

    const evmChain = (network: NetworkName) => {
      const chain = isEvmNetwork(network) ? evmChains[network] : undefined;
      if (!chain) throw new Error(`no local EVM chain for ${network}`);
      return chain;
    };
    const ledgerOf = (network: NetworkName) => {
      const ledger = isSolanaNetwork(network) ? solanaLedgers[network] : undefined;
      if (!ledger) throw new Error(`no local Solana cluster for ${network}`);
      return ledger;
    };
    const solanaSigner = async (secretKey?: Uint8Array): Promise<KeyPairSigner> =>
      secretKey ? (await solanaKeyFromSecret(secretKey)).signer : wallets.client.solana.signer;
    const evmWalletClient = (network: EvmNetworkName, privateKey: Hex = wallets.client.evm.privateKey) => {
      const chain = evmChain(network);
      return createWalletClient({ account: privateKeyToAccount(privateKey), chain: chain.chain, transport: localTransport(chain.rpcUrl) });
    };

    return {
      networks,
      evmNetworks,
      solanaNetworks,
      rpcUrls,
      facilitator: {
        url: facilitatorServer.url,
        solanaFeePayer: facilitatorServer.solanaFeePayer,
        evmAddress: facilitatorEvm.address,
        calls: facilitatorServer.calls,
      },
      targets,
      wallets,
      evmChains,
      solanaLedgers,
      startupMs: Math.round(performance.now() - startedAt),

      async usdcBalance(network, owner) {
        if (isEvmNetwork(network)) {
          evmChain(network);
          return usdcContracts[network]!.balanceOf(owner as Address);
        }
        return ledgerOf(network).usdcBalance(owner as SolanaAddress);
      },
      async nativeBalance(network, owner) {
        if (isEvmNetwork(network)) return evmChain(network).publicClient.getBalance({ address: owner as Address });
        return ledgerOf(network).lamports(owner as SolanaAddress);
      },
      async mint(network, owner, amountMicroUsdc) {
        if (isEvmNetwork(network)) {
          evmChain(network);
          await usdcContracts[network]!.mint(owner as Address, amountMicroUsdc);
          return;
        }
        await ledgerOf(network).mintUsdc(owner as SolanaAddress, amountMicroUsdc);
      },
      createUsdcAccount: (network, owner) => ledgerOf(network).createUsdcAccount(owner as SolanaAddress),
      evmWalletClient,
      x402Fetch(network, { privateKey, secretKey, maxValueMicroUsdc = 100_000n } = {}) {
        if (isEvmNetwork(network)) {
          return wrapFetchWithPayment(fetch, evmWalletClient(network, privateKey) as never, maxValueMicroUsdc) as typeof fetch;
        }
        ledgerOf(network);
        // Making a signer from a secret key is asynchronous: the fetch function awaits it.
        const signer = solanaSigner(secretKey);
        return (async (input: Parameters<typeof fetch>[0], init?: RequestInit) =>
          wrapFetchWithPayment(fetch, (await signer) as never, maxValueMicroUsdc, undefined, {
            svmConfig: { rpcUrl: rpcUrls[network]! },
          })(input as never, init)) as typeof fetch;
      },
      async solanaFetch({ secretKey, maxAmountMicroUsdc = 100_000n } = {}) {
        const urls: Partial<Record<SolanaNetworkName, string>> = {};
        for (const network of solanaNetworks) urls[network] = rpcUrls[network];
        return wrapFetchWithSolanaPayment(fetch, await solanaSigner(secretKey), { rpcUrls: urls, maxAmountMicroUsdc });
      },
      signEvmPayment: (requirements, overrides, privateKey = wallets.client.evm.privateKey) =>
        signEvmPayment(privateKeyToAccount(privateKey), requirements, overrides),
      async createSolanaPayment(requirements, overrides, secretKey) {
        const rpcUrl = rpcUrls[requirements.network as NetworkName];
        if (!rpcUrl || !isSolanaNetwork(requirements.network)) throw new Error(`no local Solana cluster for ${requirements.network}`);
        return createSolanaPayment(await solanaSigner(secretKey), requirements, rpcUrl, overrides);
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
