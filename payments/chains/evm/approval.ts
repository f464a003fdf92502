/**
 * Our wallet's one approval of Permit2 on a network's stablecoin (ERC-20 approve of every unit to
 * the canonical Permit2 contract, as @x402/evm's approval transaction does), sent through the
 * submission queue like every transaction of ours (its nonce serialized with settlements and
 * refunds), stored by the caller before it is broadcast, then its receipt waited for a bounded time.
 */
import { encodeFunctionData, maxUint256, type Hash } from 'viem';
import type { NetworkName } from '../../basics/networkTable';
import { fail, ok, type Result } from '../../basics/result';
import type { ChainDeps } from '../types';
import { erc20ApprovalAbi, PERMIT2_ADDRESS } from './permit2';
import { submitEvmTransaction } from './submit';

export interface GivenApproval {
  txHash: string;
  gasUsed: bigint;
  /** What the transaction cost in wei of the network's native coin (gas used times its price). */
  feeWei: bigint;
}

export async function givePermit2Approval(
  deps: Pick<ChainDeps, 'chains' | 'submissions' | 'paymentBounds'>,
  network: NetworkName,
  storeTransaction: (hash: string) => Promise<boolean>,
): Promise<Result<GivenApproval, string>> {
  const clients = deps.chains.evm.networks.get(network);
  if (!clients) return fail('network_not_enabled', `${network} is not an enabled EVM network`);
  const submitted = await submitEvmTransaction(
    deps,
    network,
    {
      to: clients.usdc,
      data: encodeFunctionData({ abi: erc20ApprovalAbi, functionName: 'approve', args: [PERMIT2_ADDRESS, maxUint256] }),
    },
    ({ hash }) => storeTransaction(hash),
  );
  if (!submitted.ok) return submitted;
  const hash: Hash = submitted.value.hash;
  try {
    const receipt = await clients.publicClient.waitForTransactionReceipt({
      hash,
      timeout: deps.paymentBounds.confirmationTimeoutMs,
      pollingInterval: deps.paymentBounds.confirmationPollMs,
      retryCount: 0,
    });
    if (receipt.status !== 'success') return fail('transaction_reverted', `the approval of Permit2 reverted (${hash})`);
    return ok({ txHash: hash, gasUsed: receipt.gasUsed, feeWei: receipt.gasUsed * receipt.effectiveGasPrice });
  } catch (error) {
    return fail('approval_pending', `no receipt for the approval of Permit2 (${hash}) yet: ${String(error)}`);
  }
}
