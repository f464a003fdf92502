// Smart-contract wallets on a local chain, for payers that are not EOAs: SmartWallet
// (contracts/SmartWallet.sol, ERC-1271, one owner key) deployed with CREATE2 by SmartWalletFactory,
// either at once (a deployed contract wallet) or only predicted (a counterfactual wallet whose
// signatures are ERC-6492-wrapped with the factory call that would deploy it).
//
// A wallet is also a viem LocalAccount (`account`): its address is the contract's, and it signs
// typed data with the owner's key in the wallet's encoding, so signEvmPayment (authorization.ts)
// builds an X-PAYMENT for it as for any other account. Fund it with the harness's mint.
import {
  createTestClient,
  createWalletClient,
  encodeAbiParameters,
  encodeFunctionData,
  getAddress,
  serializeErc6492Signature,
  toHex,
  type Address,
  type Hex,
  type LocalAccount,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount, toAccount } from 'viem/accounts';
import { randomBytes } from 'node:crypto';
import { smartWalletArtifact } from '../../contracts/SmartWallet.artifact.js';
import { localTransport, type LocalEvmChain } from './chain.js';
import { waitForSuccess } from './usdc.js';

export const smartWalletAbi = smartWalletArtifact.wallet.abi;
export const smartWalletFactoryAbi = smartWalletArtifact.factory.abi;

/** How the wallet's signature carries the owner's: plain 65 bytes, or abi.encode(owner, signature) (192 bytes). */
export type WalletSignatureEncoding = 'ecdsa' | 'abi';

export interface WalletFactory {
  address: Address;
  chain: LocalEvmChain;
  /** The CREATE2 address of the wallet of (owner, salt), deployed or not. */
  walletAddress(owner: Address, salt: Hex): Promise<Address>;
  /** The call that deploys the wallet of (owner, salt): what an ERC-6492 wrapper carries. */
  deploymentCall(owner: Address, salt: Hex): { to: Address; data: Hex };
  /** Deploys the wallet of (owner, salt), paid by the factory's deployer key. */
  deploy(owner: Address, salt: Hex): Promise<Address>;
}

export interface SmartWallet {
  address: Address;
  owner: LocalAccount;
  salt: Hex;
  factory: WalletFactory;
  /**
   * The wallet as a signing account. `erc6492`: wrap every signature with the factory call (as a
   * counterfactual wallet's signer does; a deployed wallet may still send it). `signer`: sign with
   * another key than the owner's (the wallet then refuses the signature).
   */
  account(options?: { encoding?: WalletSignatureEncoding; erc6492?: boolean; signer?: LocalAccount }): LocalAccount;
  isDeployed(): Promise<boolean>;
}

/** A deployer key holding ETH for gas, set by hardhat_setBalance: the chain's funded keys stay untouched. */
async function fundedDeployer(chain: LocalEvmChain): Promise<LocalAccount> {
  const deployer = privateKeyToAccount(generatePrivateKey());
  const testClient = createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  await testClient.setBalance({ address: deployer.address, value: 10n ** 18n });
  return deployer;
}

/** Deploys a SmartWalletFactory on the local chain. */
export async function deployWalletFactory(chain: LocalEvmChain): Promise<WalletFactory> {
  const deployer = await fundedDeployer(chain);
  const client = createWalletClient({ account: deployer, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  const receipt = await waitForSuccess(
    chain,
    await client.deployContract({ abi: smartWalletFactoryAbi, bytecode: smartWalletArtifact.factory.bytecode }),
  );
  if (!receipt.contractAddress)
    throw new Error(`the SmartWalletFactory deployment on ${chain.network} made no contract`);
  const address = getAddress(receipt.contractAddress);
  // One key sends every deployment of this factory: one at a time, so nonces never collide.
  let queue: Promise<unknown> = Promise.resolve();
  const deploymentCall = (owner: Address, salt: Hex) => ({
    to: address,
    data: encodeFunctionData({ abi: smartWalletFactoryAbi, functionName: 'deploy', args: [owner, salt] }),
  });
  const walletAddress = async (owner: Address, salt: Hex) =>
    getAddress(
      await chain.publicClient.readContract({
        address,
        abi: smartWalletFactoryAbi,
        functionName: 'walletAddress',
        args: [owner, salt],
      }),
    );
  return {
    address,
    chain,
    walletAddress,
    deploymentCall,
    deploy: (owner, salt) => {
      const run = queue.then(async () => {
        await waitForSuccess(chain, await client.sendTransaction(deploymentCall(owner, salt)));
        return walletAddress(owner, salt);
      });
      queue = run.catch(() => undefined);
      return run;
    },
  };
}

/**
 * A SmartWallet of a fresh owner key (or the given one) at its CREATE2 address; deployed unless
 * `deployed: false` (a counterfactual wallet: the address exists, the code does not yet).
 */
export async function createSmartWallet(
  factory: WalletFactory,
  options: { owner?: LocalAccount; salt?: Hex; deployed?: boolean } = {},
): Promise<SmartWallet> {
  const owner = options.owner ?? privateKeyToAccount(generatePrivateKey());
  const salt = options.salt ?? toHex(new Uint8Array(randomBytes(32)));
  const address =
    options.deployed === false
      ? await factory.walletAddress(owner.address, salt)
      : await factory.deploy(owner.address, salt);
  const isDeployed = async () => ((await factory.chain.publicClient.getCode({ address })) ?? '0x') !== '0x';
  return {
    address,
    owner,
    salt,
    factory,
    isDeployed,
    account: ({ encoding = 'ecdsa', erc6492 = false, signer = owner } = {}) => {
      const wrap = (ecdsa: Hex): Hex => {
        const inner =
          encoding === 'abi'
            ? encodeAbiParameters([{ type: 'address' }, { type: 'bytes' }], [owner.address, ecdsa])
            : ecdsa;
        if (!erc6492) return inner;
        const call = factory.deploymentCall(owner.address, salt);
        return serializeErc6492Signature({ address: call.to, data: call.data, signature: inner });
      };
      const account = toAccount({
        address,
        signMessage: async ({ message }) => wrap(await signer.signMessage({ message })),
        signTypedData: async (typedData) => wrap(await signer.signTypedData(typedData)),
        signTransaction: () => {
          throw new Error('a SmartWallet sends no transactions of its own: its owner calls execute');
        },
      });
      return account;
    },
  };
}
