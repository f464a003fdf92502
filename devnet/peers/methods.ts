// The methods of the Peers object: balances and minting on any running network, wallet clients,
// and paying clients (x402-fetch, @x402/fetch, our Solana payer, signed payments).
import { createWalletClient, type Address, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { Address as SolanaAddress, KeyPairSigner } from '@solana/kit';
import { wrapFetchWithPayment } from 'x402-fetch';
import { localTransport, type LocalEvmChain } from '../evm/chain.js';
import { signEvmPayment } from '../evm/authorization.js';
import type { LocalUsdc } from '../evm/usdc.js';
import {
  atomicAmount,
  isEvmNetwork,
  isSolanaNetwork,
  type EvmNetworkName,
  type NetworkName,
  type SolanaNetworkName,
} from '../networks.js';
import { solanaKeyFromSecret } from '../svm/keys.js';
import type { SolanaLedger } from '../svm/ledger.js';
import { createSolanaPayment, wrapFetchWithSolanaPayment } from '../svm/payment-client.js';
import type { Peers, PeerWallets } from './types.js';
import { x402FetchV2 } from './v2-client.js';

export type PeerMethods = Pick<
  Peers,
  | 'usdcBalance'
  | 'nativeBalance'
  | 'mint'
  | 'createUsdcAccount'
  | 'evmWalletClient'
  | 'x402Fetch'
  | 'x402FetchV2'
  | 'solanaFetch'
  | 'signEvmPayment'
  | 'createSolanaPayment'
>;

export interface RunningNetworks {
  solanaNetworks: SolanaNetworkName[];
  rpcUrls: Partial<Record<NetworkName, string>>;
  evmChains: Partial<Record<EvmNetworkName, LocalEvmChain>>;
  usdcContracts: Partial<Record<EvmNetworkName, LocalUsdc>>;
  solanaLedgers: Partial<Record<SolanaNetworkName, SolanaLedger>>;
  wallets: PeerWallets;
}

export function peerMethods({
  solanaNetworks,
  rpcUrls,
  evmChains,
  usdcContracts,
  solanaLedgers,
  wallets,
}: RunningNetworks): PeerMethods {
  const evmChain = (network: NetworkName) => {
    const chain = isEvmNetwork(network) ? evmChains[network] : undefined;
    if (!chain) throw new Error(`no local EVM chain for ${network}`);
    return chain;
  };
  const usdcOf = (network: EvmNetworkName) => {
    evmChain(network);
    const usdc = usdcContracts[network];
    if (!usdc) throw new Error(`no USDC contract on the local chain of ${network}`);
    return usdc;
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
    return createWalletClient({
      account: privateKeyToAccount(privateKey),
      chain: chain.chain,
      transport: localTransport(chain.rpcUrl),
    });
  };

  return {
    async usdcBalance(network, owner) {
      if (isEvmNetwork(network)) return usdcOf(network).balanceOf(owner as Address);
      return ledgerOf(network).usdcBalance(owner as SolanaAddress);
    },
    async nativeBalance(network, owner) {
      if (isEvmNetwork(network)) return evmChain(network).publicClient.getBalance({ address: owner as Address });
      return ledgerOf(network).lamports(owner as SolanaAddress);
    },
    async mint(network, owner, amountMicroUsdc) {
      if (isEvmNetwork(network)) {
        await usdcOf(network).mint(owner as Address, atomicAmount(network, amountMicroUsdc));
        return;
      }
      await ledgerOf(network).mintUsdc(owner as SolanaAddress, amountMicroUsdc);
    },
    createUsdcAccount: (network, owner) => ledgerOf(network).createUsdcAccount(owner as SolanaAddress),
    evmWalletClient,
    x402Fetch(network, { privateKey, secretKey, maxValueMicroUsdc = 100_000n } = {}) {
      if (isEvmNetwork(network)) {
        return wrapFetchWithPayment(
          fetch,
          evmWalletClient(network, privateKey) as never,
          maxValueMicroUsdc,
        ) as typeof fetch;
      }
      ledgerOf(network);
      const rpcUrl = rpcUrls[network];
      if (!rpcUrl) throw new Error(`no local Solana RPC URL for ${network}`);
      // Making a signer from a secret key is asynchronous: the fetch function awaits it.
      const signer = solanaSigner(secretKey);
      return async (input: Parameters<typeof fetch>[0], init?: RequestInit) =>
        wrapFetchWithPayment(fetch, await signer, maxValueMicroUsdc, undefined, {
          svmConfig: { rpcUrl },
        })(input, init);
    },
    x402FetchV2({ privateKey = wallets.client.evm.privateKey, solana = false, secretKey, ...options } = {}) {
      const account = privateKeyToAccount(privateKey);
      if (!solana) return x402FetchV2(account, options);
      const urls: Partial<Record<SolanaNetworkName, string>> = {};
      for (const network of solanaNetworks) urls[network] = rpcUrls[network];
      if (!secretKey)
        return x402FetchV2(account, { ...options, solana: { signer: wallets.client.solana.signer, rpcUrls: urls } });
      // Making a signer from a secret key is asynchronous: the fetch function awaits it.
      const signer = solanaSigner(secretKey);
      return async (input: Parameters<typeof fetch>[0], init?: RequestInit) =>
        x402FetchV2(account, { ...options, solana: { signer: await signer, rpcUrls: urls } })(input, init);
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
      if (!rpcUrl || !isSolanaNetwork(requirements.network))
        throw new Error(`no local Solana cluster for ${requirements.network}`);
      return createSolanaPayment(await solanaSigner(secretKey), requirements, rpcUrl, overrides);
    },
  };
}
