/**
 * Draining the service wallet on a local EVM chain, to see the floors refuse (payments/tracking/
 * floorCheck.ts): its whole stablecoin moved away by a real transfer signed with its key, and, with
 * `gas`, its ETH set to 0 (with `asset: false`, only that; hardhat_setBalance: nothing could pay the gas of moving it). Used by
 * `npm run sandbox:drain` and by the tests. Local chains only: never point it at a real one.
 */
import { createPublicClient, createTestClient, createWalletClient, getAddress, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { localTransport, localViemChain } from './evm/chain';
import { EVM_NETWORKS, type EvmNetworkName } from './networks';

const tokenAbi = parseAbi([
  'function balanceOf(address owner) view returns (uint256)',
  'function transfer(address to, uint256 value) returns (bool)',
]);

/** Where a drained stablecoin goes: an address nobody holds the key of. */
export const DRAIN_SINK = '0x000000000000000000000000000000000000dEaD';

export interface Drained {
  wallet: string;
  /** The stablecoin moved away, in its atomic units. */
  asset: bigint;
  /** The wallet's ETH before it was set to 0 (wei), when `gas` was asked. */
  gas?: bigint;
}

export async function drainLocalEvmWallet(
  network: EvmNetworkName,
  rpcUrl: string,
  privateKey: Hex,
  { asset: drainAsset = true, gas = false }: { asset?: boolean; gas?: boolean } = {},
): Promise<Drained> {
  const chain = localViemChain(network, rpcUrl);
  const transport = localTransport(rpcUrl);
  const account = privateKeyToAccount(privateKey);
  const usdc = getAddress(EVM_NETWORKS[network].usdc);
  const publicClient = createPublicClient({ chain, transport });
  const asset = await publicClient.readContract({
    address: usdc,
    abi: tokenAbi,
    functionName: 'balanceOf',
    args: [account.address],
  });
  if (drainAsset && asset > 0n) {
    const wallet = createWalletClient({ chain, transport, account });
    const hash = await wallet.writeContract({
      address: usdc,
      abi: tokenAbi,
      functionName: 'transfer',
      args: [DRAIN_SINK, asset],
    });
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 50 });
    if (receipt.status !== 'success') throw new Error(`the drain transfer ${hash} reverted`);
  }
  const moved = drainAsset ? asset : 0n;
  if (!gas) return { wallet: account.address, asset: moved };
  const before = await publicClient.getBalance({ address: account.address });
  await createTestClient({ mode: 'hardhat', chain, transport }).setBalance({ address: account.address, value: 0n });
  return { wallet: account.address, asset: moved, gas: before };
}
