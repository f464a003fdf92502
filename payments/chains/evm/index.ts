/**
 * The service wallet on EVM networks (viem): per-network clients built from our configuration
 * (clients.ts), EIP-3009 TransferWithAuthorization signing for paying targets (authorization.ts)
 * and Permit2 witness transfers where a target asks for them (permit2.ts, and upto.ts for upto),
 * and the reads a payment needs (reads.ts: USDC balance, authorization state, the transaction that
 * used an authorization). The USDC interface is in abi.ts, revert reasons in errors.ts.
 *
 * Chains are our own (`defineChain` with the table's chain id and the configured RPC URL), never
 * viem's built-in definitions: the EIP-712 domain takes its chain id from our table. Transports do
 * not retry (a revert is an answer) and every request has a timeout.
 */
import type { Hex } from 'viem';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { Config } from '../../basics/config';
import type { PaymentRequirements } from '../../x402/types';
import type { Result } from '../../basics/result';
import type { NetworkName } from '../../basics/networkTable';
import type { RpcObserver } from '../rpcTiming';
import {
  randomNonce,
  signTransferAuthorization,
  type SignedAuthorization,
  type SignFailureReason,
} from './authorization';
import {
  clientsLookup,
  DEFAULT_RPC_TIMEOUT_MS,
  evmNetworkClients,
  parsePrivateKey,
  type EvmNetworkClients,
} from './clients';
import { createPermit2Reads, signPermit2Transfer, type Permit2Reads, type SignedPermit2 } from './permit2';
import { createEvmReads, type EvmReads } from './reads';
import { signUptoPermit2Transfer, type SignedUpto } from './upto';

export {
  AUTHORIZATION_USED_TOPIC,
  authorizationUsedEvent,
  logsShowAuthorizationUse,
  transferWithAuthorizationTypes,
  usdcAbi,
} from './abi';
export { DEFAULT_RPC_TIMEOUT_MS, evmChain, type EvmNetworkClients } from './clients';
export {
  buildTransferAuthorization,
  CLOCK_SKEW_SECONDS,
  evmPaymentPayload,
  randomNonce,
  usdcDomain,
  type SignedAuthorization,
  type SignFailureReason,
  type TransferAuthorization,
} from './authorization';
export { revertReason, type ReadFailureReason } from './errors';
export { DEFAULT_LOG_CHUNK_BLOCKS, DEFAULT_MAX_SCAN_BLOCKS, type AuthorizationUse } from './reads';

export { asksPermit2, EXACT_PERMIT2_PROXY_ADDRESS, PERMIT2_ADDRESS, type SignedPermit2 } from './permit2';
export { UPTO_PERMIT2_PROXY_ADDRESS, type SignedUpto } from './upto';

/** Our wallet on the EVM networks: its signing, the reads of createEvmReads, and Permit2's. */
export interface EvmChains extends EvmReads, Permit2Reads {
  account: PrivateKeyAccount | undefined;
  networks: ReadonlyMap<NetworkName, EvmNetworkClients>;
  /** `nonce`: the authorization nonce to sign with, when the caller recorded it first; random otherwise. */
  signTransferAuthorization(
    requirements: PaymentRequirements,
    options: { now: Date; nonce?: Hex },
  ): Promise<Result<SignedAuthorization, SignFailureReason>>;
  /** A Permit2 witness transfer for a target that asks for Permit2; `nonce` as for signTransferAuthorization. */
  signPermit2Transfer(
    requirements: PaymentRequirements,
    options: { now: Date; nonce?: Hex },
  ): Promise<Result<SignedPermit2, SignFailureReason>>;
  /** An upto permit (at most the offer's amount) for a target that offers upto; `nonce` as for signTransferAuthorization. */
  signUptoPermit2Transfer(
    requirements: PaymentRequirements,
    options: { now: Date; nonce?: Hex },
  ): Promise<Result<SignedUpto, SignFailureReason>>;
}

// Our EVM wallet is the `evm` member of the service's Chains (chains/types.ts names no family).
declare module '../types' {
  interface FamilyWallets {
    evm: EvmChains;
  }
  interface FamilySigningFailures {
    evm: SignFailureReason;
  }
}

export interface EvmOptions {
  rpcTimeoutMs?: number;
  /** Told of every JSON-RPC request (the service's metrics). */
  onRpc?: RpcObserver;
  /** Source of authorization nonces; tests may fix it. */
  randomNonce?: () => Hex;
}

export function createEvmChains(
  config: Pick<Config, 'networks' | 'evmPrivateKey'>,
  options: EvmOptions = {},
): EvmChains {
  const timeout = options.rpcTimeoutMs ?? DEFAULT_RPC_TIMEOUT_MS;
  const nextNonce = options.randomNonce ?? randomNonce;
  const account = config.evmPrivateKey === undefined ? undefined : parsePrivateKey(config.evmPrivateKey);
  const networks = evmNetworkClients(config, account, timeout, options.onRpc);
  const clientsOf = clientsLookup(networks);
  return {
    account,
    networks,
    signTransferAuthorization: (requirements, signing) =>
      signTransferAuthorization({ clientsOf, account, nextNonce }, requirements, signing),
    signPermit2Transfer: (requirements, { now, nonce }) =>
      signPermit2Transfer({ clientsOf, account }, requirements, { now, nonce: nonce ?? nextNonce() }),
    signUptoPermit2Transfer: (requirements, { now, nonce }) =>
      signUptoPermit2Transfer({ clientsOf, account }, requirements, { now, nonce: nonce ?? nextNonce() }),
    ...createPermit2Reads(clientsOf),
    // Closures over clientsOf, not methods: they need no `this`.
    ...createEvmReads(clientsOf),
  };
}
