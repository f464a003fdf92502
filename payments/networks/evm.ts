/**
 * The service wallet on EVM networks (viem): per-network clients built from our configuration,
 * EIP-3009 TransferWithAuthorization signing for paying targets, and the reads a payment needs
 * (USDC balance, authorization state, the transaction that used an authorization).
 *
 * Chains are our own (`defineChain` with the table's chain id and the configured RPC URL), never
 * viem's built-in definitions: the EIP-712 domain takes its chain id from our table. Transports do
 * not retry (a revert is an answer) and every request has a timeout.
 */
import { randomBytes } from 'node:crypto';
import {
  BaseError,
  createPublicClient,
  createWalletClient,
  decodeErrorResult,
  defineChain,
  getAddress,
  http,
  isAddress,
  isHex,
  parseAbi,
  parseAbiItem,
  TimeoutError,
  toHex,
  zeroAddress,
  type Account,
  type Address,
  type Chain,
  type Hash,
  type Hex,
  type PublicClient,
  type Transport,
  type TypedDataDomain,
  type WalletClient,
} from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { ConfigError, type Config } from '../config';
import { encodePaymentHeader } from '../x402/headers';
import { X402_VERSION, type ExactEvmPayload, type PaymentPayload, type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../result';
import { canonicalNetwork, NETWORK_TABLE, type NetworkName } from '../networkTable';

export const DEFAULT_RPC_TIMEOUT_MS = 10_000;
/** Authorizations are valid from this long ago, for clocks behind ours (as x402 clients do). */
export const CLOCK_SKEW_SECONDS = 600n;
/** findAuthorizationUse looks back at most this many blocks unless told otherwise. */
export const DEFAULT_MAX_SCAN_BLOCKS = 10_000n;
/** eth_getLogs ranges per request; many providers refuse more than a few thousand blocks. */
export const DEFAULT_LOG_CHUNK_BLOCKS = 1_000n;

export const usdcAbi = parseAbi([
  'function balanceOf(address owner) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
]);

export const authorizationUsedEvent = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)');

export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export interface TransferAuthorization {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
}

export interface SignedAuthorization {
  network: NetworkName;
  /** X-PAYMENT as an object; `header` is its encoding. */
  payment: PaymentPayload<ExactEvmPayload>;
  header: string;
  authorization: TransferAuthorization;
}

export type SignFailureReason = 'not_evm_network' | 'network_not_enabled' | 'no_wallet' | 'asset_mismatch' | 'invalid_requirements';
export type ReadFailureReason = 'network_not_enabled' | 'invalid_argument' | 'rpc_timeout' | 'rpc_error';

export type AuthorizationUse =
  | { state: 'unused' }
  /** Settled: the transaction that emitted AuthorizationUsed. */
  | { state: 'settled'; transactionHash: Hash; blockNumber: bigint }
  /** The nonce is spent but no AuthorizationUsed event was found in the scanned range (canceled, or older). */
  | { state: 'used_without_event'; fromBlock: bigint; toBlock: bigint };

export interface EvmNetworkClients {
  network: NetworkName;
  chainId: number;
  usdc: Address;
  chain: Chain;
  publicClient: PublicClient<Transport, Chain>;
  /** Present when EVM_PRIVATE_KEY is configured. */
  walletClient: WalletClient<Transport, Chain, Account> | undefined;
}

export interface EvmChains {
  account: PrivateKeyAccount | undefined;
  networks: ReadonlyMap<NetworkName, EvmNetworkClients>;
  /** `nonce`: the authorization nonce to sign with, when the caller recorded it first; random otherwise. */
  signTransferAuthorization(
    requirements: PaymentRequirements,
    options: { now: Date; nonce?: Hex },
  ): Promise<Result<SignedAuthorization, SignFailureReason>>;
  usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  authorizationState(network: NetworkName, authorizer: string, nonce: string): Promise<Result<boolean, ReadFailureReason>>;
  findAuthorizationUse(
    network: NetworkName,
    authorizer: string,
    nonce: string,
    options?: { fromBlock?: bigint; maxBlocks?: bigint; chunkBlocks?: bigint },
  ): Promise<Result<AuthorizationUse, ReadFailureReason>>;
  /** The newest block: its number and timestamp (unix seconds), the chain's own clock. */
  latestBlock(network: NetworkName): Promise<Result<{ number: bigint; timestamp: bigint }, ReadFailureReason>>;
}

export interface EvmOptions {
  rpcTimeoutMs?: number;
  /** Source of authorization nonces; tests may fix it. */
  randomNonce?: () => Hex;
}

export function evmChain(network: NetworkName, rpcUrl: string): Chain {
  const { chainId } = NETWORK_TABLE[network];
  if (chainId === undefined) throw new RangeError(`${network} is not an EVM network`);
  return defineChain({
    id: chainId,
    name: network,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

export function randomNonce(): Hex {
  return toHex(new Uint8Array(randomBytes(32)));
}

/** The EIP-712 domain of USDC for these requirements: name and version from extra when given, else our table. */
export function usdcDomain(network: NetworkName, requirements: Pick<PaymentRequirements, 'asset' | 'extra'>): TypedDataDomain {
  const entry = NETWORK_TABLE[network];
  if (entry.chainType !== 'evm' || entry.chainId === undefined || entry.eip712 === undefined) {
    throw new RangeError(`${network} is not an EVM network`);
  }
  const name = requirements.extra?.name;
  const version = requirements.extra?.version;
  return {
    name: typeof name === 'string' && name !== '' ? name : entry.eip712.name,
    version: typeof version === 'string' && version !== '' ? version : entry.eip712.version,
    chainId: entry.chainId,
    verifyingContract: getAddress(requirements.asset),
  };
}

/** What we sign for these requirements (pure): exactly the amount asked, to payTo, valid from 10 minutes ago. */
export function buildTransferAuthorization(
  requirements: Pick<PaymentRequirements, 'payTo' | 'maxAmountRequired' | 'maxTimeoutSeconds'>,
  { from, now, nonce }: { from: Address; now: Date; nonce: Hex },
): TransferAuthorization {
  const nowSeconds = BigInt(Math.floor(now.getTime() / 1000));
  return {
    from,
    to: getAddress(requirements.payTo),
    value: BigInt(requirements.maxAmountRequired),
    validAfter: nowSeconds - CLOCK_SKEW_SECONDS,
    validBefore: nowSeconds + BigInt(requirements.maxTimeoutSeconds),
    nonce,
  };
}

export function evmPaymentPayload(network: string, signature: Hex, authorization: TransferAuthorization): PaymentPayload<ExactEvmPayload> {
  return {
    x402Version: X402_VERSION,
    scheme: 'exact',
    network,
    payload: {
      signature,
      authorization: {
        from: authorization.from,
        to: authorization.to,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
        nonce: authorization.nonce,
      },
    },
  };
}

/** Revert data as nodes attach it: a hex string, or (hardhat, some providers) `{message, data}`. */
function revertDataOf(value: unknown): Hex | undefined {
  if (isHex(value, { strict: true }) && value.length >= 10) return value;
  if (value !== null && typeof value === 'object' && 'data' in value) return revertDataOf((value as { data: unknown }).data);
  return undefined;
}

/**
 * Why a contract call or a gas estimate reverted, as the contract said it: the Error(string) reason
 * (e.g. "FiatTokenV2: authorization is not yet valid"), a panic code, or a custom error's selector.
 * Nodes differ in where they put the revert data (hardhat answers -32603 with it nested, geth code 3
 * with it beside the message), so every cause is searched. Undefined when the node gave no data and
 * no reason in words: the caller then has only the node's generic message.
 */
export function revertReason(error: unknown): string | undefined {
  const causes: unknown[] = [];
  if (error instanceof BaseError) {
    error.walk((cause) => {
      causes.push(cause);
      return false;
    });
  } else {
    causes.push(error);
  }
  for (const cause of causes) {
    const data = revertDataOf((cause as { data?: unknown } | null)?.data);
    if (data === undefined) continue;
    try {
      const decoded = decodeErrorResult({ data });
      if (decoded.errorName === 'Error') return String(decoded.args?.[0]);
      if (decoded.errorName === 'Panic') return `panic 0x${BigInt(decoded.args?.[0] as bigint).toString(16)}`;
      return decoded.errorName;
    } catch {
      return `custom error ${data.slice(0, 10)}`;
    }
  }
  // No data, but some nodes still say the reason in the message.
  for (const cause of causes) {
    const message = [(cause as { details?: unknown })?.details, (cause as { message?: unknown })?.message].filter((text) => typeof text === 'string').join('\n');
    const said = /reverted with reason string '([^']*)'/.exec(message)?.[1] ?? /execution reverted: ([^\n]+)/.exec(message)?.[1];
    if (said) return said.trim();
  }
  return undefined;
}

function readFailure(error: unknown): { ok: false; reason: ReadFailureReason; details: string } {
  const timedOut = error instanceof BaseError ? error.walk((cause) => cause instanceof TimeoutError) !== null : false;
  if (timedOut) return fail('rpc_timeout', 'the RPC endpoint did not answer in time');
  const message = error instanceof BaseError ? error.shortMessage : error instanceof Error ? error.message : String(error);
  return fail('rpc_error', message);
}

function parsePrivateKey(key: string): PrivateKeyAccount {
  try {
    return privateKeyToAccount(key as Hex);
  } catch {
    throw new ConfigError('EVM_PRIVATE_KEY', 'not a valid secp256k1 private key');
  }
}

export function createEvmChains(config: Pick<Config, 'networks' | 'evmPrivateKey'>, options: EvmOptions = {}): EvmChains {
  const timeout = options.rpcTimeoutMs ?? DEFAULT_RPC_TIMEOUT_MS;
  const nextNonce = options.randomNonce ?? randomNonce;
  const account = config.evmPrivateKey === undefined ? undefined : parsePrivateKey(config.evmPrivateKey);
  const networks = new Map<NetworkName, EvmNetworkClients>();
  for (const settings of config.networks) {
    if (NETWORK_TABLE[settings.name].chainType !== 'evm') continue;
    const chain = evmChain(settings.name, settings.rpcUrl);
    const transport = http(settings.rpcUrl, { retryCount: 0, timeout });
    networks.set(settings.name, {
      network: settings.name,
      chainId: chain.id,
      usdc: getAddress(settings.usdc),
      chain,
      publicClient: createPublicClient({ chain, transport }),
      walletClient: account ? createWalletClient({ account, chain, transport }) : undefined,
    });
  }

  function clientsOf(network: NetworkName): Result<EvmNetworkClients, 'network_not_enabled'> {
    const clients = networks.get(network);
    return clients ? ok(clients) : fail('network_not_enabled', `${network} is not an enabled EVM network`);
  }

  async function signTransferAuthorization(
    requirements: PaymentRequirements,
    { now, nonce }: { now: Date; nonce?: Hex },
  ): Promise<Result<SignedAuthorization, SignFailureReason>> {
    const network = canonicalNetwork(requirements.network);
    if (network === undefined || NETWORK_TABLE[network].chainType !== 'evm') return fail('not_evm_network', `${requirements.network} is not an EVM network`);
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (account === undefined) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
    // We sign only for our USDC: verifyingContract = asset, so any other asset would move another token.
    if (!isAddress(requirements.asset, { strict: false }) || getAddress(requirements.asset) !== clients.value.usdc) {
      return fail('asset_mismatch', `asset ${requirements.asset} is not USDC on ${network}`);
    }
    if (!isAddress(requirements.payTo) || requirements.payTo.toLowerCase() === zeroAddress) {
      return fail('invalid_requirements', `payTo ${requirements.payTo} is not an EVM address`);
    }
    if (!/^[1-9][0-9]*$/.test(requirements.maxAmountRequired)) return fail('invalid_requirements', 'maxAmountRequired is not a positive integer');
    if (!Number.isSafeInteger(requirements.maxTimeoutSeconds) || requirements.maxTimeoutSeconds <= 0) {
      return fail('invalid_requirements', 'maxTimeoutSeconds is not a positive whole number');
    }
    if (nonce !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(nonce)) return fail('invalid_requirements', 'nonce is not 32 bytes of hex');
    const authorization = buildTransferAuthorization(requirements, { from: account.address, now, nonce: nonce ?? nextNonce() });
    const signature = await account.signTypedData({
      domain: usdcDomain(network, requirements),
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message: authorization,
    });
    const payment = evmPaymentPayload(requirements.network, signature, authorization);
    return ok({ network, payment, header: encodePaymentHeader(payment), authorization });
  }

  async function usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(owner, { strict: false })) return fail('invalid_argument', `${owner} is not an EVM address`);
    try {
      const { publicClient, usdc } = clients.value;
      return ok(await publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [getAddress(owner)] }));
    } catch (error) {
      return readFailure(error);
    }
  }

  async function authorizationState(network: NetworkName, authorizer: string, nonce: string): Promise<Result<boolean, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (!isAddress(authorizer, { strict: false })) return fail('invalid_argument', `${authorizer} is not an EVM address`);
    if (!/^0x[0-9a-fA-F]{64}$/.test(nonce)) return fail('invalid_argument', 'nonce is not 32 bytes of hex');
    try {
      const { publicClient, usdc } = clients.value;
      return ok(
        await publicClient.readContract({
          address: usdc,
          abi: usdcAbi,
          functionName: 'authorizationState',
          args: [getAddress(authorizer), nonce as Hex],
        }),
      );
    } catch (error) {
      return readFailure(error);
    }
  }

  async function findAuthorizationUse(
    network: NetworkName,
    authorizer: string,
    nonce: string,
    scan: { fromBlock?: bigint; maxBlocks?: bigint; chunkBlocks?: bigint } = {},
  ): Promise<Result<AuthorizationUse, ReadFailureReason>> {
    const state = await authorizationState(network, authorizer, nonce);
    if (!state.ok) return state;
    if (!state.value) return ok({ state: 'unused' });
    const { publicClient, usdc } = (clientsOf(network) as { ok: true; value: EvmNetworkClients }).value;
    const maxBlocks = scan.maxBlocks ?? DEFAULT_MAX_SCAN_BLOCKS;
    const chunkBlocks = scan.chunkBlocks ?? DEFAULT_LOG_CHUNK_BLOCKS;
    if (maxBlocks <= 0n || chunkBlocks <= 0n) return fail('invalid_argument', 'maxBlocks and chunkBlocks must be positive');
    try {
      const latest = await publicClient.getBlockNumber({ cacheTime: 0 });
      const oldestInWindow = latest - maxBlocks + 1n > 0n ? latest - maxBlocks + 1n : 0n;
      const lowest = scan.fromBlock !== undefined && scan.fromBlock > oldestInWindow ? scan.fromBlock : oldestInWindow;
      // Newest first: a watch job asks soon after the payment, so the event is usually near the head.
      for (let toBlock = latest; toBlock >= lowest; toBlock -= chunkBlocks) {
        const fromBlock = toBlock - chunkBlocks + 1n > lowest ? toBlock - chunkBlocks + 1n : lowest;
        const logs = await publicClient.getLogs({
          address: usdc,
          event: authorizationUsedEvent,
          args: { authorizer: getAddress(authorizer), nonce: nonce as Hex },
          fromBlock,
          toBlock,
          strict: true,
        });
        const log = logs.find((candidate) => candidate.transactionHash !== null && candidate.blockNumber !== null);
        if (log) return ok({ state: 'settled', transactionHash: log.transactionHash, blockNumber: log.blockNumber });
      }
      return ok({ state: 'used_without_event', fromBlock: lowest, toBlock: latest });
    } catch (error) {
      return readFailure(error);
    }
  }

  async function latestBlock(network: NetworkName): Promise<Result<{ number: bigint; timestamp: bigint }, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    try {
      const block = await clients.value.publicClient.getBlock({ blockTag: 'latest' });
      return ok({ number: block.number, timestamp: block.timestamp });
    } catch (error) {
      return readFailure(error);
    }
  }

  return { account, networks, signTransferAuthorization, usdcBalance, authorizationState, findAuthorizationUse, latestBlock };
}
