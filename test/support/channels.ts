/** A batch-settlement channel as the x402BatchSettlement contract holds it on a local chain. */
import type { Hex } from 'viem';
import type { EvmNetworkName, Peers } from '../../devnet/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';

/** The channel's balance and what its receiver has claimed, read from the chain. */
export async function channelOnChain(
  peers: Peers,
  network: EvmNetworkName,
  channelId: string,
): Promise<{ balance: bigint; totalClaimed: bigint }> {
  const [balance, totalClaimed] = await peers.evmChains[network]!.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'channels',
    args: [channelId as Hex],
  });
  return { balance, totalClaimed };
}
