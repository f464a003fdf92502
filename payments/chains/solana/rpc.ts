/**
 * Per-network Solana RPC clients. JSON-RPC over HTTP only, no websocket subscriptions: confirmation
 * is learned by polling getSignatureStatuses. Every request carries an abort signal with a timeout.
 */
import {
  createDefaultRpcTransport,
  createSolanaRpc,
  createSolanaRpcFromTransport,
  type Address,
  type RpcTransport,
} from '@solana/kit';
import { getTokenDecoder, getTokenSize, TOKEN_PROGRAM_ADDRESS } from '@solana-program/token';
import type { Config } from '../../basics/config';
import { fail, ok, type Result } from '../../basics/result';
import { NETWORK_TABLE, type NetworkName } from '../../basics/networkTable';
import { methodOf, observed, type RpcObserver } from '../rpcTiming';

export const DEFAULT_RPC_TIMEOUT_MS = 10_000;

export type SolanaRpc = ReturnType<typeof createSolanaRpc>;

export type ReadFailureReason = 'network_not_enabled' | 'invalid_argument' | 'rpc_timeout' | 'rpc_error';

export interface SvmNetworkClients {
  network: NetworkName;
  usdc: Address;
  rpc: SolanaRpc;
}

/** The enabled Solana networks' clients, and how each request is bounded in time. */
export interface SvmRpc {
  networks: ReadonlyMap<NetworkName, SvmNetworkClients>;
  /** The options of one request: a fresh abort signal that fires after the RPC timeout. */
  bounded(): { abortSignal: AbortSignal };
  clientsOf(network: NetworkName): Result<SvmNetworkClients, 'network_not_enabled'>;
}

/** kit's RPC of one URL, with each request's time reported to `observe` when given. */
function solanaRpc(url: string, network: NetworkName, observe: RpcObserver | undefined): SolanaRpc {
  if (!observe) return createSolanaRpc(url);
  const transport = createDefaultRpcTransport({ url });
  const timed: RpcTransport = (config) => observed(observe, network, methodOf(config.payload), () => transport(config));
  return createSolanaRpcFromTransport(timed);
}

export function createSvmRpc(config: Pick<Config, 'networks'>, timeoutMs: number, observe?: RpcObserver): SvmRpc {
  const networks = new Map<NetworkName, SvmNetworkClients>();
  for (const settings of config.networks) {
    if (NETWORK_TABLE[settings.name].chainType !== 'solana') continue;
    networks.set(settings.name, {
      network: settings.name,
      usdc: settings.usdc as Address,
      rpc: solanaRpc(settings.rpcUrl, settings.name, observe),
    });
  }
  return {
    networks,
    bounded: () => ({ abortSignal: AbortSignal.timeout(timeoutMs) }),
    clientsOf(network) {
      const clients = networks.get(network);
      return clients ? ok(clients) : fail('network_not_enabled', `${network} is not an enabled Solana network`);
    },
  };
}

function isTimeout(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++) {
    if (cause.name === 'TimeoutError' || cause.name === 'AbortError') return true;
  }
  return false;
}

export function rpcFailure(error: unknown): { ok: false; reason: 'rpc_timeout' | 'rpc_error'; details: string } {
  if (isTimeout(error)) return fail('rpc_timeout', 'the RPC endpoint did not answer in time');
  return fail('rpc_error', error instanceof Error ? error.message : String(error));
}

/** A classic token program account, decoded; undefined for any other account. */
export function readTokenAccount(account: { programAddress: Address; data: Uint8Array }) {
  if (account.programAddress !== TOKEN_PROGRAM_ADDRESS || account.data.length !== getTokenSize()) return undefined;
  return getTokenDecoder().decode(account.data);
}
