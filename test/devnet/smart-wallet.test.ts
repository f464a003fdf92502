// SmartWallet and SmartWalletFactory, the contract wallets of the smart-wallet payment tests: the
// committed artifact is what the source compiles to; the factory's CREATE2 address is the one an
// ERC-6492 wrapper promises; the wallet answers ERC-1271 for its owner's signatures only.
import { hashTypedData, isErc6492Signature, parseErc6492Signature } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { smartWalletArtifact } from '../../contracts/SmartWallet.artifact.js';
import { startEvmChain, type LocalEvmChain } from '../../devnet/evm/chain.js';
import {
  createSmartWallet,
  deployWalletFactory,
  smartWalletAbi,
  type WalletFactory,
} from '../../devnet/evm/smart-wallet.js';
import { compileWallet, renderWalletArtifactModule } from '../../devnet/evm/wallet-artifact.js';

const MAGIC = '0x1626ba7e';
const typedData = {
  domain: { name: 'Test', version: '1', chainId: 84532 },
  types: { Note: [{ name: 'text', type: 'string' }] },
  primaryType: 'Note',
  message: { text: 'pay' },
} as const;

describe('the committed artifact', () => {
  it('is what contracts/SmartWallet.sol compiles to (rebuild: npx tsx devnet/evm/wallet-artifact.ts)', () => {
    expect(renderWalletArtifactModule(compileWallet())).toBe(renderWalletArtifactModule(smartWalletArtifact as never));
  });
});

describe('SmartWallet on a local chain', () => {
  let chain: LocalEvmChain;
  let factory: WalletFactory;

  beforeAll(async () => {
    chain = await startEvmChain('base-sepolia', []);
    factory = await deployWalletFactory(chain);
  });
  afterAll(async () => {
    await chain.close();
  });

  const isValid = (address: `0x${string}`, signature: `0x${string}`) =>
    chain.publicClient.readContract({
      address,
      abi: smartWalletAbi,
      functionName: 'isValidSignature',
      args: [hashTypedData(typedData), signature],
    });

  it('is deployed at the address the factory predicts; deploying again returns the same wallet', async () => {
    const counterfactual = await createSmartWallet(factory, { deployed: false });
    expect(await counterfactual.isDeployed()).toBe(false);
    expect(await factory.deploy(counterfactual.owner.address, counterfactual.salt)).toBe(counterfactual.address);
    expect(await counterfactual.isDeployed()).toBe(true);
    expect(await factory.deploy(counterfactual.owner.address, counterfactual.salt)).toBe(counterfactual.address);
    expect(
      await chain.publicClient.readContract({
        address: counterfactual.address,
        abi: smartWalletAbi,
        functionName: 'owner',
      }),
    ).toBe(counterfactual.owner.address);
  });

  it("answers the magic value for its owner's signature in both encodings, and not for another key's", async () => {
    const wallet = await createSmartWallet(factory);
    const stranger = privateKeyToAccount(generatePrivateKey());
    expect(await isValid(wallet.address, await wallet.account().signTypedData(typedData))).toBe(MAGIC);
    expect(await isValid(wallet.address, await wallet.account({ encoding: 'abi' }).signTypedData(typedData))).toBe(
      MAGIC,
    );
    expect(await isValid(wallet.address, await wallet.account({ signer: stranger }).signTypedData(typedData))).toBe(
      '0xffffffff',
    );
    expect(
      await isValid(
        wallet.address,
        await wallet.account({ signer: stranger, encoding: 'abi' }).signTypedData(typedData),
      ),
    ).toBe('0xffffffff');
  });

  it('an ERC-6492 signature carries the factory call; viem verifies it before and after deployment', async () => {
    const wallet = await createSmartWallet(factory, { deployed: false });
    const signature = await wallet.account({ erc6492: true }).signTypedData(typedData);
    expect(isErc6492Signature(signature)).toBe(true);
    const parsed = parseErc6492Signature(signature);
    expect(parsed).toEqual({
      address: factory.address,
      data: factory.deploymentCall(wallet.owner.address, wallet.salt).data,
      signature: await wallet.account().signTypedData(typedData),
    });
    expect(await chain.publicClient.verifyTypedData({ ...typedData, address: wallet.address, signature })).toBe(true);
    // Verification deploys nothing.
    expect(await wallet.isDeployed()).toBe(false);
    await factory.deploy(wallet.owner.address, wallet.salt);
    expect(await chain.publicClient.verifyTypedData({ ...typedData, address: wallet.address, signature })).toBe(true);
    const wrong = await wallet
      .account({ erc6492: true, signer: privateKeyToAccount(generatePrivateKey()) })
      .signTypedData(typedData);
    expect(await chain.publicClient.verifyTypedData({ ...typedData, address: wallet.address, signature: wrong })).toBe(
      false,
    );
  });
});
