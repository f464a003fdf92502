// The x402 version 2 facilitator: @x402/core's x402Facilitator with @x402/evm's and @x402/svm's
// exact schemes and @x402/evm's upto scheme, unmodified, behind the same HTTP API as the v1
// facilitator (GET /supported, POST /verify, POST /settle) on 127.0.0.1. Each EVM network gets its
// own scheme instances, their signer bound to that network's local chain (exact settles EIP-3009
// authorizations and Permit2 witness transfers through x402ExactPermit2Proxy, upto through
// x402UptoPermit2Proxy, both planted on every local chain); every Solana cluster is served by @x402/svm's
// toFacilitatorSvmSigner with its own fee payer key and a kit RPC client per cluster on our local
// JSON-RPC endpoint (one settlement cache shared by the v1 and v2 Solana kinds, as
// registerExactSvmScheme does). v1 kinds are listed too where the v1 schemes know the network, as
// public v2 facilitators do. Every call is recorded for tests.
import express from 'express';
import { x402Facilitator } from '@x402/core/facilitator';
import type { Network, PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner, type FacilitatorEvmSigner } from '@x402/evm';
import { SettlementCache, toFacilitatorSvmSigner, type FacilitatorRpcClient } from '@x402/svm';
import { ExactSvmScheme } from '@x402/svm/exact/facilitator';
import { ExactSvmSchemeV1 } from '@x402/svm/exact/v1/facilitator';
import { createSolanaRpc, devnet, mainnet, type KeyPairSigner } from '@solana/kit';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/facilitator';
import { UptoEvmScheme } from '@x402/evm/upto/facilitator';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { createWalletClient, type LocalAccount } from 'viem';
import { localTransport, type LocalEvmChain } from '../evm/chain.js';
import { RECEIPT_TIMEOUT_MS } from '../evm/usdc.js';
import { listenLocally, type RunningServer } from '../http.js';
import type { KeyedQueue } from '../key-queue.js';
import { serveVerifyAndSettle } from './routes.js';
import { CAIP2_NETWORKS, type EvmNetworkName, type SolanaNetworkName } from '../networks.js';

export interface FacilitatorV2Call {
  path: '/verify' | '/settle';
  /** The x402Version of the payment (1 or 2). */
  x402Version: number;
  /** As the requirements name it: CAIP-2 for v2, the v1 name for v1. */
  network: string;
  payment: PaymentPayload;
  requirements: PaymentRequirements;
  answer: VerifyResponse | SettleResponse;
}

export interface FacilitatorV2 extends RunningServer {
  /** The EVM address that sends settlements (and pays their gas) on every EVM network. */
  evmAddress: string;
  /** The fee payer of Solana settlements on every cluster (`extra.feePayer` of its Solana kinds). */
  solanaFeePayer: string;
  calls: FacilitatorV2Call[];
  /** What GET /supported answers. */
  supported: ReturnType<x402Facilitator['getSupported']>;
}

export interface FacilitatorV2Options {
  evmChains: ReadonlyMap<EvmNetworkName, LocalEvmChain>;
  /** Sends settlements; needs ETH on every chain. */
  evmAccount: LocalAccount;
  /** JSON-RPC URL of each started Solana cluster. */
  solanaRpcUrls: ReadonlyMap<SolanaNetworkName, string>;
  /** Co-signs and pays the fees of Solana settlements; needs SOL on every cluster. */
  solanaFeePayer: KeyPairSigner;
  queue: KeyedQueue;
}

/** A FacilitatorEvmSigner on one local chain: viem's public and wallet client methods, sends serialized per chain. */
function localEvmSigner(chain: LocalEvmChain, account: LocalAccount, queue: KeyedQueue): FacilitatorEvmSigner {
  const wallet = createWalletClient({ account, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  const publicClient = chain.publicClient;
  // Two sends from one key at once would read the same nonce: one at a time per chain and key.
  const sendKey = `v2:${chain.network}:${account.address}`;
  return toFacilitatorEvmSigner(
    {
      address: account.address,
      // From the facilitator's address, as a viem wallet client with public actions calls: the upto
      // proxy lets only the facilitator the payer named settle, simulations included.
      readContract: (args) => publicClient.readContract({ ...args, account: account.address }),
      verifyTypedData: (args) =>
        publicClient.verifyTypedData(args as Parameters<typeof publicClient.verifyTypedData>[0]),
      writeContract: (args) => queue.run(sendKey, () => wallet.writeContract({ ...args, account, chain: chain.chain })),
      sendTransaction: (args) =>
        queue.run(sendKey, () => wallet.sendTransaction({ ...args, account, chain: chain.chain })),
      waitForTransactionReceipt: (args) => publicClient.waitForTransactionReceipt(args),
      getCode: (args) => publicClient.getCode(args),
    },
    { confirmationTimeoutMs: RECEIPT_TIMEOUT_MS },
  );
}

/** A kit RPC client on a local cluster, typed as the cluster it stands for (as @x402/svm's signer wants). */
function localSolanaRpc(network: SolanaNetworkName, url: string): FacilitatorRpcClient {
  return network === 'solana' ? createSolanaRpc(mainnet(url)) : createSolanaRpc(devnet(url));
}

export function createFacilitatorV2({
  evmChains,
  evmAccount,
  solanaRpcUrls,
  solanaFeePayer,
  queue,
}: FacilitatorV2Options): x402Facilitator {
  const facilitator = new x402Facilitator();
  for (const [network, chain] of evmChains) {
    const signer = localEvmSigner(chain, evmAccount, queue);
    facilitator.register(CAIP2_NETWORKS[network], new ExactEvmScheme(signer));
    facilitator.register(CAIP2_NETWORKS[network], new UptoEvmScheme(signer));
    // x402Facilitator types every network as CAIP-2; version 1 kinds carry the v1 name all the same.
    const v1Name: string = network;
    if (Object.hasOwn(EVM_NETWORK_CHAIN_ID_MAP, v1Name))
      facilitator.registerV1(v1Name as Network, new ExactEvmSchemeV1(signer));
  }
  if (solanaRpcUrls.size > 0) {
    const rpcs: Record<string, FacilitatorRpcClient> = {};
    // @x402/svm's v1 scheme names the cluster by its v1 name when it asks the signer, its v2 scheme
    // by CAIP-2: both keys lead to the local cluster (a missing key would fall back to a public RPC).
    for (const [network, url] of solanaRpcUrls) {
      const rpc = localSolanaRpc(network, url);
      rpcs[CAIP2_NETWORKS[network]] = rpc;
      rpcs[network] = rpc;
    }
    const signer = toFacilitatorSvmSigner(solanaFeePayer, rpcs);
    const settlementCache = new SettlementCache();
    for (const network of solanaRpcUrls.keys()) {
      facilitator.register(CAIP2_NETWORKS[network], new ExactSvmScheme(signer, settlementCache));
      // The v1 names @x402/svm's v1 scheme knows are ours (solana, solana-devnet).
      const v1Name: string = network;
      facilitator.registerV1(v1Name as Network, new ExactSvmSchemeV1(signer, settlementCache));
    }
  }
  return facilitator;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export async function startFacilitatorV2(options: FacilitatorV2Options): Promise<FacilitatorV2> {
  const facilitator = createFacilitatorV2(options);
  const calls: FacilitatorV2Call[] = [];
  const supported = facilitator.getSupported();
  const app = express();
  app.use(express.json({ limit: '1mb' }));

  app.get('/supported', (_request, response) => {
    response.json(supported);
  });

  function readBody(body: unknown): { payment: PaymentPayload; requirements: PaymentRequirements } | undefined {
    if (!isObject(body)) return undefined;
    const { paymentPayload, paymentRequirements } = body;
    if (!isObject(paymentPayload) || !isObject(paymentRequirements)) return undefined;
    if (typeof paymentPayload.x402Version !== 'number') return undefined;
    if (typeof paymentRequirements.network !== 'string' || typeof paymentRequirements.scheme !== 'string')
      return undefined;
    return {
      payment: paymentPayload as unknown as PaymentPayload,
      requirements: paymentRequirements as unknown as PaymentRequirements,
    };
  }

  serveVerifyAndSettle(app, {
    readBody,
    verify: (payment, requirements) => facilitator.verify(payment, requirements),
    verifyFailed: (error): VerifyResponse => ({
      isValid: false,
      invalidReason: 'unexpected_verify_error',
      invalidMessage: messageOf(error),
    }),
    settle: (payment, requirements) => facilitator.settle(payment, requirements),
    settleFailed: (error, requirements): SettleResponse => ({
      success: false,
      errorReason: 'unexpected_settle_error',
      errorMessage: messageOf(error),
      transaction: '',
      network: requirements.network,
    }),
    record: (path, payment, requirements, answer) =>
      calls.push({
        path,
        x402Version: payment.x402Version,
        network: requirements.network,
        payment,
        requirements,
        answer,
      }),
  });

  const server = await listenLocally(app);
  return {
    ...server,
    evmAddress: options.evmAccount.address,
    solanaFeePayer: options.solanaFeePayer.address,
    calls,
    supported,
  };
}
