// Permit2 and x402's two Permit2 proxies on a local chain: the runtime code of contracts/Permit2.sol
// planted at their canonical addresses with hardhat_setCode (none has a constructor or state to
// set up), as on every chain where they are deployed. @x402/evm's clients sign for these addresses
// and its facilitators call them there.
import { createTestClient, getAddress, type Address } from 'viem';
import { permit2Artifact } from '../../contracts/Permit2.artifact.js';
import { localTransport, type LocalEvmChain } from './chain.js';

export const PERMIT2_ADDRESS: Address = getAddress('0x000000000022D473030F116dDEE9F6B43aC78BA3');
export const EXACT_PERMIT2_PROXY_ADDRESS: Address = getAddress('0x402085c248EeA27D92E8b30b2C58ed07f9E20001');
export const UPTO_PERMIT2_PROXY_ADDRESS: Address = getAddress('0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002');

export const permit2Abi = permit2Artifact.permit2.abi;
export const exactPermit2ProxyAbi = permit2Artifact.exactProxy.abi;
export const uptoPermit2ProxyAbi = permit2Artifact.uptoProxy.abi;

export async function installPermit2(chain: LocalEvmChain): Promise<void> {
  const testClient = createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  await Promise.all([
    testClient.setCode({ address: PERMIT2_ADDRESS, bytecode: permit2Artifact.permit2.deployedBytecode }),
    testClient.setCode({ address: EXACT_PERMIT2_PROXY_ADDRESS, bytecode: permit2Artifact.exactProxy.deployedBytecode }),
    testClient.setCode({ address: UPTO_PERMIT2_PROXY_ADDRESS, bytecode: permit2Artifact.uptoProxy.deployedBytecode }),
  ]);
}
