// USDC on a local chain: LocalUsdc's runtime code planted at the network's canonical address with
// hardhat_setCode, then initialized with that network's EIP-712 name and version, symbol and
// decimals (the stablecoin of a network without USDC, MegaETH's MegaUSD, is the same contract with
// 18 decimals). The owner of every copy is the harness's minter key.
import {
  createTestClient,
  createWalletClient,
  getAddress,
  type Address,
  type Hash,
  type LocalAccount,
  type TransactionReceipt,
} from 'viem';
import { localUsdcArtifact } from '../../contracts/LocalUsdc.artifact.js';
import type { KeyedQueue } from '../key-queue.js';
import { EVM_NETWORKS } from '../networks.js';
import { localTransport, type LocalEvmChain } from './chain.js';

export const usdcAbi = localUsdcArtifact.abi;

export const RECEIPT_TIMEOUT_MS = 15_000;

export interface LocalUsdc {
  address: Address;
  mint(to: Address, amount: bigint): Promise<TransactionReceipt>;
  balanceOf(owner: Address): Promise<bigint>;
}

/** Waits for the receipt of a transaction sent by the harness; a reverted one is an error here. */
export async function waitForSuccess(chain: LocalEvmChain, hash: Hash): Promise<TransactionReceipt> {
  const receipt = await chain.publicClient.waitForTransactionReceipt({
    hash,
    timeout: RECEIPT_TIMEOUT_MS,
    pollingInterval: 20,
  });
  if (receipt.status !== 'success') throw new Error(`transaction ${hash} on ${chain.network} reverted`);
  return receipt;
}

export async function installUsdc(chain: LocalEvmChain, owner: LocalAccount, queue: KeyedQueue): Promise<LocalUsdc> {
  const { usdc, eip712, symbol, decimals } = EVM_NETWORKS[chain.network];
  const address = getAddress(usdc);
  const transport = localTransport(chain.rpcUrl);
  const testClient = createTestClient({ mode: 'hardhat', chain: chain.chain, transport });
  const ownerClient = createWalletClient({ account: owner, chain: chain.chain, transport });
  const queueKey = `${chain.network}:${owner.address}`;

  await testClient.setCode({ address, bytecode: localUsdcArtifact.deployedBytecode });
  await queue.run(queueKey, async () => {
    const hash = await ownerClient.writeContract({
      address,
      abi: usdcAbi,
      functionName: 'initialize',
      args: [eip712.name, symbol, eip712.version, decimals, owner.address],
    });
    await waitForSuccess(chain, hash);
  });

  return {
    address,
    mint: (to, amount) =>
      queue.run(queueKey, async () => {
        const hash = await ownerClient.writeContract({
          address,
          abi: usdcAbi,
          functionName: 'mint',
          args: [to, amount],
        });
        return waitForSuccess(chain, hash);
      }),
    balanceOf: (holder) =>
      chain.publicClient.readContract({ address, abi: usdcAbi, functionName: 'balanceOf', args: [holder] }),
  };
}
