// x402's batch-settlement channels on a local chain: the runtime code of contracts/BatchSettlement.sol
// planted at the canonical addresses with hardhat_setCode (x402BatchSettlement, its ERC-3009 and
// Permit2 deposit collectors, and Multicall3, which @x402/evm's batch-settlement facilitator reads
// channel state through). None has a constructor or state to set up: the channels contract derives
// its EIP-712 domain from the chain id and its own address. @x402/evm's clients sign for these
// addresses and its facilitator calls them there.
import { createTestClient, getAddress, type Address } from 'viem';
import { batchSettlementArtifact } from '../../contracts/BatchSettlement.artifact.js';
import { localTransport, type LocalEvmChain } from './chain.js';

export const BATCH_SETTLEMENT_ADDRESS: Address = getAddress('0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003');
export const ERC3009_DEPOSIT_COLLECTOR_ADDRESS: Address = getAddress('0x4020806089470a89826cB9fB1f4059150b550004');
export const PERMIT2_DEPOSIT_COLLECTOR_ADDRESS: Address = getAddress('0x4020425FAf3B746C082C2f942b4E5159887B0005');
export const MULTICALL3_ADDRESS: Address = getAddress('0xcA11bde05977b3631167028862bE2a173976CA11');

export const batchSettlementAbi = batchSettlementArtifact.batchSettlement.abi;
export const erc3009DepositCollectorAbi = batchSettlementArtifact.erc3009Collector.abi;
export const permit2DepositCollectorAbi = batchSettlementArtifact.permit2Collector.abi;

export async function installBatchSettlement(chain: LocalEvmChain): Promise<void> {
  const testClient = createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  const { batchSettlement, erc3009Collector, permit2Collector, multicall3 } = batchSettlementArtifact;
  await Promise.all([
    testClient.setCode({ address: BATCH_SETTLEMENT_ADDRESS, bytecode: batchSettlement.deployedBytecode }),
    testClient.setCode({ address: ERC3009_DEPOSIT_COLLECTOR_ADDRESS, bytecode: erc3009Collector.deployedBytecode }),
    testClient.setCode({ address: PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, bytecode: permit2Collector.deployedBytecode }),
    testClient.setCode({ address: MULTICALL3_ADDRESS, bytecode: multicall3.deployedBytecode }),
  ]);
}
