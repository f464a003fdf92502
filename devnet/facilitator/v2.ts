// The x402 version 2 facilitator: @x402/core's x402Facilitator with @x402/evm's and @x402/svm's
// exact schemes and @x402/evm's upto and batch-settlement schemes, unmodified, behind the same HTTP API as the v1
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
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/facilitator';
import { EVM_NETWORK_CHAIN_ID_MAP } from '@x402/evm/v1';
import { concatHex, createWalletClient, encodeFunctionData, keccak256, toHex, type Hex, type LocalAccount } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
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

/** Where the pending facilitator is served, under the v2 facilitator's URL. */
export const PENDING_PATH = '/pending';
/** How long a held settlement waits before it is sent on its own. */
export const DEFAULT_PENDING_RELEASE_MS = 1_000;

/**
 * The pending facilitator (`/pending` under the v2 facilitator): the same schemes, but every EVM
 * settlement is signed and held, answered `settlement_pending` with its hash, and broadcast when
 * released (at once by `held.release()`, or on its own after `pendingReleaseAfterMs`).
 */
export interface PendingFacilitator {
  url: string;
  evmAddress: string;
  calls: FacilitatorV2Call[];
  held: HeldBroadcasts;
}

export interface FacilitatorV2 extends RunningServer {
  /** The EVM address that sends settlements (and pays their gas) on every EVM network. */
  evmAddress: string;
  /** The fee payer of Solana settlements on every cluster (`extra.feePayer` of its Solana kinds). */
  solanaFeePayer: string;
  calls: FacilitatorV2Call[];
  /** What GET /supported answers. */
  supported: ReturnType<x402Facilitator['getSupported']>;
  pending: PendingFacilitator;
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
  /** How long the pending facilitator holds a settlement before sending it; default DEFAULT_PENDING_RELEASE_MS. */
  pendingReleaseAfterMs?: number;
}

/**
 * Settlements signed but not broadcast yet: the pending facilitator's (startFacilitatorV2's
 * `/pending` routes). Each is sent, in the order signed, when released: by `release()`, or on its
 * own `releaseAfterMs` after it was signed, as a settlement that lands a moment after its
 * facilitator stopped waiting for it. `drop()` forgets them: they never land.
 */
export class HeldBroadcasts {
  private readonly held = new Map<string, { send: () => Promise<unknown>; timer: NodeJS.Timeout }>();
  /** Our own next nonce per chain: held transactions are not on the chain to count them. */
  readonly nonces = new Map<string, number>();
  private sending: Promise<void> = Promise.resolve();

  constructor(private readonly releaseAfterMs: number) {}

  hold(hash: string, send: () => Promise<unknown>): void {
    const timer = setTimeout(() => void this.releaseOne(hash), this.releaseAfterMs);
    timer.unref();
    this.held.set(hash, { send, timer });
  }

  isHeld(hash: string): boolean {
    return this.held.has(hash);
  }

  count(): number {
    return this.held.size;
  }

  /** Broadcasts every held settlement, in the order signed; resolves once the node has them. */
  async release(): Promise<void> {
    for (const hash of [...this.held.keys()]) await this.releaseOne(hash);
  }

  /** Forgets every held settlement: none of them ever lands. */
  drop(): void {
    for (const { timer } of this.held.values()) clearTimeout(timer);
    this.held.clear();
    this.nonces.clear();
  }

  private releaseOne(hash: string): Promise<void> {
    // One broadcast at a time, in order, so that nonces arrive in sequence.
    this.sending = this.sending
      .catch(() => undefined)
      .then(async () => {
        const entry = this.held.get(hash);
        if (!entry) return;
        clearTimeout(entry.timer);
        try {
          await entry.send();
        } finally {
          // Forgotten only once sent: until then a receipt is not waited for.
          this.held.delete(hash);
        }
      });
    return this.sending.catch(() => undefined);
  }
}

/**
 * A FacilitatorEvmSigner on one local chain: viem's public and wallet client methods, sends serialized per chain.
 * With `held`, a send is signed and its hash answered, but it is broadcast only when released
 * (HeldBroadcasts), and a receipt of a held transaction is not waited for: the wait fails at once,
 * as a facilitator's bounded wait does, so @x402/evm answers `settlement_pending` with the hash.
 */
function localEvmSigner(
  chain: LocalEvmChain,
  account: LocalAccount,
  queue: KeyedQueue,
  held?: HeldBroadcasts,
): FacilitatorEvmSigner {
  const wallet = createWalletClient({ account, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  const publicClient = chain.publicClient;
  // Two sends from one key at once would read the same nonce: one at a time per chain and key.
  const sendKey = `v2:${chain.network}:${account.address}`;
  const holdSend = (request: { to: Hex; data: Hex }) =>
    queue.run(sendKey, async () => {
      if (!held) throw new Error('not a holding signer');
      const nonce =
        held.nonces.get(chain.network) ??
        (await publicClient.getTransactionCount({ address: account.address, blockTag: 'pending' }));
      const prepared = await wallet.prepareTransactionRequest({ ...request, account, chain: chain.chain, nonce });
      const serialized = await wallet.signTransaction(prepared as never);
      held.nonces.set(chain.network, nonce + 1);
      const hash = keccak256(serialized);
      held.hold(hash, () => publicClient.request({ method: 'eth_sendRawTransaction', params: [serialized] }));
      return hash;
    });
  return toFacilitatorEvmSigner(
    {
      address: account.address,
      // From the facilitator's address, as a viem wallet client with public actions calls: the upto
      // proxy lets only the facilitator the payer named settle, simulations included.
      readContract: (args) => publicClient.readContract({ ...args, account: account.address }),
      verifyTypedData: (args) =>
        publicClient.verifyTypedData(args as Parameters<typeof publicClient.verifyTypedData>[0]),
      writeContract: (args) =>
        held
          ? holdSend({
              to: args.address,
              data: concatHex([
                encodeFunctionData({ abi: args.abi, functionName: args.functionName, args: args.args }),
                ...((args as { dataSuffix?: Hex }).dataSuffix ? [(args as { dataSuffix: Hex }).dataSuffix] : []),
              ]),
            })
          : queue.run(sendKey, () => wallet.writeContract({ ...args, account, chain: chain.chain })),
      sendTransaction: (args) =>
        held
          ? holdSend({ to: args.to, data: args.data })
          : queue.run(sendKey, () => wallet.sendTransaction({ ...args, account, chain: chain.chain })),
      waitForTransactionReceipt: (args) =>
        held?.isHeld(args.hash)
          ? Promise.reject(new Error(`transaction ${args.hash} is not confirmed yet (held by the pending facilitator)`))
          : publicClient.waitForTransactionReceipt(args),
      getCode: (args) => publicClient.getCode(args),
    },
    { confirmationTimeoutMs: RECEIPT_TIMEOUT_MS },
  );
}

/** A kit RPC client on a local cluster, typed as the cluster it stands for (as @x402/svm's signer wants). */
function localSolanaRpc(network: SolanaNetworkName, url: string): FacilitatorRpcClient {
  return network === 'solana' ? createSolanaRpc(mainnet(url)) : createSolanaRpc(devnet(url));
}

export function createFacilitatorV2(
  { evmChains, evmAccount, solanaRpcUrls, solanaFeePayer, queue }: FacilitatorV2Options,
  held?: HeldBroadcasts,
): x402Facilitator {
  const facilitator = new x402Facilitator();
  for (const [network, chain] of evmChains) {
    const signer = localEvmSigner(chain, evmAccount, queue, held);
    facilitator.register(CAIP2_NETWORKS[network], new ExactEvmScheme(signer));
    facilitator.register(CAIP2_NETWORKS[network], new UptoEvmScheme(signer));
    // batch-settlement channels (x402BatchSettlement and its deposit collectors, planted on every
    // local chain): deposits, claims, settles and refunds. No authorizer key of its own, so it
    // advertises no receiverAuthorizer: a receiver signs its own claims and refunds.
    facilitator.register(CAIP2_NETWORKS[network], new BatchSettlementEvmScheme(signer));
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

/** GET /supported, POST /verify and POST /settle of one facilitator on `app`, every call recorded in `calls`. */
function serveFacilitator(app: express.Express, facilitator: x402Facilitator, calls: FacilitatorV2Call[]) {
  const supported = facilitator.getSupported();
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
  return supported;
}

/** ETH for the pending facilitator's gas on every chain (its key is its own: held sends keep their own nonces). */
const PENDING_FACILITATOR_WEI = 1_000n * 10n ** 18n;

export async function startFacilitatorV2(options: FacilitatorV2Options): Promise<FacilitatorV2> {
  const facilitator = createFacilitatorV2(options);
  const calls: FacilitatorV2Call[] = [];
  const app = express();
  const supported = serveFacilitator(app, facilitator, calls);

  // The same facilitator under /pending, with its own EVM key, whose settlements are held: it
  // answers settlement_pending (as @x402/evm does when its wait for the receipt ends first) and
  // the transaction lands when released.
  const held = new HeldBroadcasts(options.pendingReleaseAfterMs ?? DEFAULT_PENDING_RELEASE_MS);
  const pendingAccount = privateKeyToAccount(generatePrivateKey());
  await Promise.all(
    [...options.evmChains.values()].map((chain) =>
      chain.publicClient.request({
        method: 'hardhat_setBalance',
        params: [pendingAccount.address, toHex(PENDING_FACILITATOR_WEI)],
      } as never),
    ),
  );
  const pendingFacilitator = createFacilitatorV2(
    { ...options, evmAccount: pendingAccount, solanaRpcUrls: new Map() },
    held,
  );
  const pendingCalls: FacilitatorV2Call[] = [];
  const pendingApp = express();
  serveFacilitator(pendingApp, pendingFacilitator, pendingCalls);
  app.use(PENDING_PATH, pendingApp);

  const server = await listenLocally(app);
  return {
    ...server,
    evmAddress: options.evmAccount.address,
    solanaFeePayer: options.solanaFeePayer.address,
    calls,
    supported,
    pending: { url: `${server.url}${PENDING_PATH}`, evmAddress: pendingAccount.address, calls: pendingCalls, held },
  };
}
