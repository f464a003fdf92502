/** What we read from an EVM chain: USDC balances, authorization state and use, the newest block. */
import { getAddress, isAddress, type Hash, type Hex } from 'viem';
import { fail, ok, type Result } from '../../basics/result';
import type { NetworkName } from '../../basics/networkTable';
import { authorizationUsedEvent, usdcAbi } from './abi';
import type { ClientsOf, EvmNetworkClients } from './clients';
import { readFailure, type ReadFailureReason } from './errors';

/** findAuthorizationUse looks back at most this many blocks unless told otherwise. */
export const DEFAULT_MAX_SCAN_BLOCKS = 10_000n;
/** eth_getLogs ranges per request; many providers refuse more than a few thousand blocks. */
export const DEFAULT_LOG_CHUNK_BLOCKS = 1_000n;

export type AuthorizationUse =
  | { state: 'unused' }
  /** Settled: the transaction that emitted AuthorizationUsed. */
  | { state: 'settled'; transactionHash: Hash; blockNumber: bigint }
  /** The nonce is spent but no AuthorizationUsed event was found in the scanned range (canceled, or older). */
  | { state: 'used_without_event'; fromBlock: bigint; toBlock: bigint };

export interface EvmReads {
  usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  /** The owner's balance of the chain's own token, which pays gas (wei). */
  gasBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>>;
  authorizationState(
    network: NetworkName,
    authorizer: string,
    nonce: string,
  ): Promise<Result<boolean, ReadFailureReason>>;
  findAuthorizationUse(
    network: NetworkName,
    authorizer: string,
    nonce: string,
    options?: { fromBlock?: bigint; maxBlocks?: bigint; chunkBlocks?: bigint },
  ): Promise<Result<AuthorizationUse, ReadFailureReason>>;
  /** The newest block: its number and timestamp (unix seconds), the chain's own clock. */
  latestBlock(network: NetworkName): Promise<Result<{ number: bigint; timestamp: bigint }, ReadFailureReason>>;
}

export function createEvmReads(clientsOf: ClientsOf): EvmReads {
  /**
   * One read on a network's clients: an argument refused (`refusal`, checked once the network is
   * known to be served) changes nothing; a node's failure is a read failure.
   */
  async function read<T>(
    network: NetworkName,
    refusal: string | undefined,
    step: (clients: EvmNetworkClients) => Promise<T>,
  ): Promise<Result<T, ReadFailureReason>> {
    const clients = clientsOf(network);
    if (!clients.ok) return clients;
    if (refusal !== undefined) return fail('invalid_argument', refusal);
    try {
      return ok(await step(clients.value));
    } catch (error) {
      return readFailure(error);
    }
  }

  function usdcBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const refusal = isAddress(owner, { strict: false }) ? undefined : `${owner} is not an EVM address`;
    return read(network, refusal, ({ publicClient, usdc }) =>
      publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [getAddress(owner)] }),
    );
  }

  function gasBalance(network: NetworkName, owner: string): Promise<Result<bigint, ReadFailureReason>> {
    const refusal = isAddress(owner, { strict: false }) ? undefined : `${owner} is not an EVM address`;
    return read(network, refusal, ({ publicClient }) => publicClient.getBalance({ address: getAddress(owner) }));
  }

  function authorizationState(
    network: NetworkName,
    authorizer: string,
    nonce: string,
  ): Promise<Result<boolean, ReadFailureReason>> {
    const refusal = !isAddress(authorizer, { strict: false })
      ? `${authorizer} is not an EVM address`
      : !/^0x[0-9a-fA-F]{64}$/.test(nonce)
        ? 'nonce is not 32 bytes of hex'
        : undefined;
    return read(network, refusal, ({ publicClient, usdc }) =>
      publicClient.readContract({
        address: usdc,
        abi: usdcAbi,
        functionName: 'authorizationState',
        args: [getAddress(authorizer), nonce as Hex],
      }),
    );
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
    if (maxBlocks <= 0n || chunkBlocks <= 0n)
      return fail('invalid_argument', 'maxBlocks and chunkBlocks must be positive');
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
        // RPC data: a node may answer a log of a pending block, without hash or number, whatever the types say.
        const log = logs.find(
          (candidate: { transactionHash: Hex | null; blockNumber: bigint | null }) =>
            candidate.transactionHash !== null && candidate.blockNumber !== null,
        );
        if (log) return ok({ state: 'settled', transactionHash: log.transactionHash, blockNumber: log.blockNumber });
      }
      return ok({ state: 'used_without_event', fromBlock: lowest, toBlock: latest });
    } catch (error) {
      return readFailure(error);
    }
  }

  function latestBlock(
    network: NetworkName,
  ): Promise<Result<{ number: bigint; timestamp: bigint }, ReadFailureReason>> {
    return read(network, undefined, async ({ publicClient }) => {
      const block = await publicClient.getBlock({ blockTag: 'latest' });
      return { number: block.number, timestamp: block.timestamp };
    });
  }

  return { usdcBalance, gasBalance, authorizationState, findAuthorizationUse, latestBlock };
}
