// LocalUsdc, the EIP-3009 token the local chains carry: the committed artifact is what the source
// compiles to, and on chain it behaves as FiatToken v2 does for the calls payments make.
import {
  createWalletClient,
  encodeFunctionData,
  getAddress,
  domainSeparator,
  parseSignature,
  size,
  zeroHash,
  type Address,
  type Hex,
  type LocalAccount,
  type WalletClient,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localUsdcArtifact } from '../../contracts/LocalUsdc.artifact.js';
import { randomNonce } from '../../devnet/evm/authorization.js';
import { transferWithAuthorizationTypes } from '../../payments/chains/evm';
import { localTransport, startEvmChain, type LocalEvmChain } from '../../devnet/evm/chain.js';
import { createSmartWallet, deployWalletFactory } from '../../devnet/evm/smart-wallet.js';
import { compileUsdc, renderUsdcArtifactModule } from '../../devnet/evm/usdc-artifact.js';
import { installUsdc, usdcAbi, type LocalUsdc } from '../../devnet/evm/usdc.js';
import { KeyedQueue } from '../../devnet/key-queue.js';
import { EVM_NETWORK_NAMES, EVM_NETWORKS, type EvmNetworkName } from '../../devnet/networks.js';

const ETH = 10n ** 18n;

describe('the committed artifact', () => {
  it('is what contracts/LocalUsdc.sol compiles to (rebuild: npx tsx devnet/evm/usdc-artifact.ts)', () => {
    const compiled = compileUsdc();
    expect(renderUsdcArtifactModule(compiled)).toBe(renderUsdcArtifactModule(localUsdcArtifact as never));
    expect(compiled.deployedBytecode.length).toBeGreaterThan(2);
  });
});

describe('LocalUsdc on the local chains', () => {
  const [ownerKey, payeeKey, relayerKey] = [generatePrivateKey(), generatePrivateKey(), generatePrivateKey()];
  const owner = privateKeyToAccount(ownerKey);
  const payer = privateKeyToAccount(generatePrivateKey());
  const payee = privateKeyToAccount(payeeKey);
  const relayer = privateKeyToAccount(relayerKey);
  const chains = new Map<EvmNetworkName, LocalEvmChain>();
  const tokens = new Map<EvmNetworkName, LocalUsdc>();
  let chain: LocalEvmChain;
  let token: Address;

  beforeAll(async () => {
    const queue = new KeyedQueue();
    await Promise.all(
      EVM_NETWORK_NAMES.map(async (network) => {
        // The payer holds no ETH: an authorization is submitted by someone else.
        const started = await startEvmChain(
          network,
          [ownerKey, payeeKey, relayerKey].map((privateKey) => ({ privateKey, balanceWei: 10n * ETH })),
        );
        chains.set(network, started);
        tokens.set(network, await installUsdc(started, owner, queue));
      }),
    );
    chain = chains.get('base-sepolia')!;
    token = tokens.get('base-sepolia')!.address;
    await tokens.get('base-sepolia')!.mint(payer.address, 50_000_000n);
  });

  afterAll(async () => {
    await Promise.all([...chains.values()].map((started) => started.close()));
  });

  function wallet(account: LocalAccount): WalletClient {
    return createWalletClient({ account, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  }

  const read = (
    functionName: 'balanceOf' | 'name' | 'version' | 'decimals' | 'symbol' | 'DOMAIN_SEPARATOR' | 'owner',
    args: readonly [] | readonly [Address] = [],
    on: LocalEvmChain = chain,
    at: Address = token,
  ): Promise<unknown> => on.publicClient.readContract({ address: at, abi: usdcAbi, functionName, args });

  async function authorization(
    signer: LocalAccount,
    overrides: Partial<{
      to: Address;
      value: bigint;
      validAfter: bigint;
      validBefore: bigint;
      nonce: Hex;
      chainId: number;
      primaryType: 'TransferWithAuthorization' | 'ReceiveWithAuthorization';
    }> = {},
  ) {
    const now = BigInt(Math.floor(Date.now() / 1000));
    const message = {
      from: signer.address,
      to: overrides.to ?? payee.address,
      value: overrides.value ?? 1_000_000n,
      validAfter: overrides.validAfter ?? now - 60n,
      validBefore: overrides.validBefore ?? now + 600n,
      nonce: overrides.nonce ?? randomNonce(),
    };
    const primaryType = overrides.primaryType ?? 'TransferWithAuthorization';
    // Both authorizations have the fields of TransferWithAuthorization.
    const types = { [primaryType]: transferWithAuthorizationTypes.TransferWithAuthorization };
    const signature = await signer.signTypedData({
      domain: { name: 'USDC', version: '2', chainId: overrides.chainId ?? 84532, verifyingContract: token },
      types,
      primaryType,
      message,
    });
    // A contract wallet's signature need not be 65 bytes: (v, r, s) only of one that is (the others get none).
    const { r, s, v } = size(signature) === 65 ? parseSignature(signature) : { r: zeroHash, s: zeroHash, v: 0n };
    const fields = [
      message.from,
      message.to,
      message.value,
      message.validAfter,
      message.validBefore,
      message.nonce,
    ] as const;
    return { message, signature, fields, vrs: [Number(v), r, s] as const };
  }

  async function send(from: LocalAccount, data: Hex): Promise<'success' | 'reverted'> {
    const hash = await wallet(from).sendTransaction({
      account: from,
      chain: chain.chain,
      to: token,
      data,
      gas: 300_000n,
    });
    return (await chain.publicClient.waitForTransactionReceipt({ hash, timeout: 10_000, pollingInterval: 20 })).status;
  }

  async function revertReason(from: LocalAccount, data: Hex): Promise<string> {
    try {
      await chain.publicClient.call({ account: from, to: token, data });
    } catch (error) {
      return error instanceof Error ? error.message : String(error);
    }
    return 'did not revert';
  }

  it('carries each network’s name, version and chain id in its EIP-712 domain', async () => {
    for (const network of EVM_NETWORK_NAMES) {
      const on = chains.get(network)!;
      const at = getAddress(EVM_NETWORKS[network].usdc);
      const { eip712, chainId } = EVM_NETWORKS[network];
      expect(tokens.get(network)!.address).toBe(at);
      expect(await read('name', [], on, at)).toBe(eip712.name);
      expect(await read('version', [], on, at)).toBe(eip712.version);
      expect(await read('decimals', [], on, at)).toBe(6);
      expect(await read('symbol', [], on, at)).toBe('USDC');
      expect(await read('owner', [], on, at)).toBe(owner.address);
      expect(await read('DOMAIN_SEPARATOR', [], on, at)).toBe(
        domainSeparator({ domain: { name: eip712.name, version: eip712.version, chainId, verifyingContract: at } }),
      );
    }
  });

  it('moves funds with transferWithAuthorization, bytes form, signed by the payer; a second use reverts', async () => {
    const { fields, signature, message } = await authorization(payer);
    const before = (await read('balanceOf', [payee.address])) as bigint;
    const data = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [...fields, signature],
    });
    expect(await send(relayer, data)).toBe('success');
    expect(await read('balanceOf', [payee.address])).toBe(before + message.value);
    expect(
      await chain.publicClient.readContract({
        address: token,
        abi: usdcAbi,
        functionName: 'authorizationState',
        args: [payer.address, message.nonce],
      }),
    ).toBe(true);
    expect(await revertReason(relayer, data)).toContain('authorization is used or canceled');
  });

  it('moves funds with transferWithAuthorization, (v, r, s) form', async () => {
    const { fields, vrs, message } = await authorization(payer, { value: 2_500_000n });
    const before = (await read('balanceOf', [payer.address])) as bigint;
    const data = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [...fields, ...vrs],
    });
    expect(await send(relayer, data)).toBe('success');
    expect(await read('balanceOf', [payer.address])).toBe(before - message.value);
  });

  it("asks a signer with code through ERC-1271, as FiatToken v2.2: only the wallet's yes moves funds", async () => {
    const factory = await deployWalletFactory(chain);
    const smart = await createSmartWallet(factory);
    await tokens.get('base-sepolia')!.mint(smart.address, 5_000_000n);
    const transfer = (fields: readonly unknown[], signature: readonly unknown[]) =>
      encodeFunctionData({
        abi: usdcAbi,
        functionName: 'transferWithAuthorization',
        args: [...fields, ...signature] as never,
      });
    const long = await authorization(smart.account({ encoding: 'abi' }), { value: 1_000_000n });
    expect((long.signature.length - 2) / 2).toBe(192);
    const short = await authorization(smart.account(), { value: 2_000_000n });
    const refusals = [
      // Another key signed: the wallet answers 0xffffffff.
      await authorization(smart.account({ signer: relayer }), { value: 1n }),
      await authorization(smart.account({ signer: relayer, encoding: 'abi' }), { value: 1n }),
      // A 6492 wrapper is not unwrapped by the token: the wallet sees bytes it cannot decode.
      await authorization(smart.account({ erc6492: true }), { value: 1n }),
    ];
    for (const refused of refusals) {
      expect(await revertReason(relayer, transfer(refused.fields, [refused.signature]))).toContain(
        'FiatTokenV2: invalid signature',
      );
    }
    // A contract without isValidSignature (the factory) is refused, not an error.
    const noWallet = await authorization(smart.account(), { value: 1n });
    const noWalletFields = [factory.address, ...noWallet.fields.slice(1)];
    expect(await revertReason(relayer, transfer(noWalletFields, [noWallet.signature]))).toContain(
      'FiatTokenV2: invalid signature',
    );
    expect(await read('balanceOf', [smart.address])).toBe(5_000_000n);

    const before = (await read('balanceOf', [payee.address])) as bigint;
    expect(await send(relayer, transfer(long.fields, [long.signature]))).toBe('success');
    expect(await send(relayer, transfer(short.fields, short.vrs))).toBe('success');
    expect(await read('balanceOf', [smart.address])).toBe(2_000_000n);
    expect(await read('balanceOf', [payee.address])).toBe(before + 3_000_000n);
  });

  it('refuses a signature by someone else, for another chain, before validAfter, at or after validBefore, above the balance', async () => {
    const now = BigInt(Math.floor(Date.now() / 1000));
    const forged = await authorization(relayer);
    const forgedFields = [payer.address, ...forged.fields.slice(1)] as unknown as typeof forged.fields;
    const cases: Array<[Promise<{ fields: readonly unknown[]; signature: Hex }>, string]> = [
      [Promise.resolve({ fields: forgedFields, signature: forged.signature }), 'invalid signature'],
      [authorization(payer, { chainId: 8453 }), 'invalid signature'],
      [authorization(payer, { validAfter: now + 120n }), 'authorization is not yet valid'],
      [authorization(payer, { validBefore: now - 1n }), 'authorization is expired'],
      [authorization(payer, { value: 10n ** 12n }), 'transfer amount exceeds balance'],
    ];
    for (const [pending, reason] of cases) {
      const { fields, signature } = await pending;
      const data = encodeFunctionData({
        abi: usdcAbi,
        functionName: 'transferWithAuthorization',
        args: [...fields, signature] as never,
      });
      expect(await revertReason(relayer, data)).toContain(reason);
    }
  });

  it('lets only the payee submit receiveWithAuthorization', async () => {
    const { fields, signature, message } = await authorization(payer, {
      primaryType: 'ReceiveWithAuthorization',
      value: 3n,
    });
    const data = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'receiveWithAuthorization',
      args: [...fields, signature],
    });
    expect(await revertReason(relayer, data)).toContain('caller must be the payee');
    const before = (await read('balanceOf', [payee.address])) as bigint;
    expect(await send(payee, data)).toBe('success');
    expect(await read('balanceOf', [payee.address])).toBe(before + message.value);
  });

  it('cancels an unused authorization, after which it cannot be used', async () => {
    const { fields, signature, message } = await authorization(payer);
    const cancel = await payer.signTypedData({
      domain: { name: 'USDC', version: '2', chainId: 84532, verifyingContract: token },
      types: {
        CancelAuthorization: [
          { name: 'authorizer', type: 'address' },
          { name: 'nonce', type: 'bytes32' },
        ],
      },
      primaryType: 'CancelAuthorization',
      message: { authorizer: payer.address, nonce: message.nonce },
    });
    const cancelData = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'cancelAuthorization',
      args: [payer.address, message.nonce, cancel],
    });
    expect(await send(relayer, cancelData)).toBe('success');
    const data = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [...fields, signature],
    });
    expect(await revertReason(relayer, data)).toContain('authorization is used or canceled');
  });

  it('can be initialized once, and minted only by its owner', async () => {
    const initialize = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'initialize',
      args: ['X', 'X', '9', 6, relayer.address],
    });
    expect(await revertReason(relayer, initialize)).toContain('already initialized');
    const mint = encodeFunctionData({ abi: usdcAbi, functionName: 'mint', args: [relayer.address, 1n] });
    expect(await revertReason(relayer, mint)).toContain('caller is not the owner');
  });

  it('transfers, approves and transfers from an allowance', async () => {
    const payeeBefore = (await read('balanceOf', [payee.address])) as bigint;
    const relayerBefore = (await read('balanceOf', [relayer.address])) as bigint;
    expect(
      await send(payee, encodeFunctionData({ abi: usdcAbi, functionName: 'approve', args: [relayer.address, 5n] })),
    ).toBe('success');
    const pull = encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferFrom',
      args: [payee.address, relayer.address, 5n],
    });
    expect(await send(relayer, pull)).toBe('success');
    expect(await revertReason(relayer, pull)).toContain('exceeds allowance');
    expect(
      await send(relayer, encodeFunctionData({ abi: usdcAbi, functionName: 'transfer', args: [payee.address, 2n] })),
    ).toBe('success');
    expect(await read('balanceOf', [payee.address])).toBe(payeeBefore - 3n);
    expect(await read('balanceOf', [relayer.address])).toBe(relayerBefore + 3n);
  });
});
