/**
 * x402 `batch-settlement` on EVM, the payer's way out of a channel without the seller: our wallet
 * calls `initiateWithdraw(config, amount)`, and once the channel's withdrawDelay has passed by the
 * chain's clock, `finalizeWithdraw(config)`, which pays us what is still unclaimed of the amount.
 * The calls are sent through the submission queue of our key (sendReceiverCall), their hash stored
 * before broadcast by the caller.
 */
import { encodeFunctionData, parseAbi, type Address, type Hex } from 'viem';
import type { EvmNetworkClients } from '../clients';
import { BATCH_SETTLEMENT_ADDRESS, type ChannelConfig } from './voucher';

const CONFIG =
  '(address payer, address payerAuthorizer, address receiver, address receiverAuthorizer, address token, uint40 withdrawDelay, bytes32 salt)';

const payerWithdrawAbi = parseAbi([
  `function initiateWithdraw(${CONFIG} config, uint128 amount)`,
  `function finalizeWithdraw(${CONFIG} config)`,
]);

export function initiateWithdrawCall(config: ChannelConfig, amount: bigint): { to: Address; data: Hex } {
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({ abi: payerWithdrawAbi, functionName: 'initiateWithdraw', args: [config, amount] }),
  };
}

export function finalizeWithdrawCall(config: ChannelConfig): { to: Address; data: Hex } {
  return {
    to: BATCH_SETTLEMENT_ADDRESS,
    data: encodeFunctionData({ abi: payerWithdrawAbi, functionName: 'finalizeWithdraw', args: [config] }),
  };
}

/** The chain's clock: the latest block's timestamp, unix seconds (what the contract compares the delay with). */
export async function chainSeconds(clients: EvmNetworkClients): Promise<bigint> {
  const block = await clients.publicClient.getBlock({ blockTag: 'latest' });
  return block.timestamp;
}
