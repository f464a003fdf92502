// Our EIP-3009 authorizations settled on the harness's local chains (hardhat, real chain ids, the
// USDC contract at the canonical address): balances move by exactly the amount, the nonce is spent,
// and findAuthorizationUse finds the settling transaction.
import { createTestClient, createWalletClient, getAddress, type Hash, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NETWORK_TABLE } from '../../payments/basics/networkTable';
import { createEvmChains, usdcAbi, type EvmChains } from '../../payments/chains/evm';
import type { PaymentRequirements } from '../../payments/x402/types';
import { localTransport } from '../../devnet/evm/chain';
import { startPeers, type Peers } from '../../devnet/index';
import { ifStarted } from '../support/teardown';

const NETWORKS = ['base-sepolia', 'skale-base-sepolia'] as const;
type Network = (typeof NETWORKS)[number];

let peers: Peers;
let chains: EvmChains;
const relayer = privateKeyToAccount(generatePrivateKey());

beforeAll(async () => {
  peers = await startPeers({ networks: [...NETWORKS], targets: [] });
  chains = createEvmChains({
    networks: NETWORKS.map((name) => ({ name, rpcUrl: peers.rpcUrls[name]!, usdc: NETWORK_TABLE[name].usdc })),
    evmPrivateKey: peers.wallets.service.evm.privateKey,
  });
  // A third party pays the gas, as a facilitator does: the payer needs none.
  for (const network of NETWORKS) {
    const chain = peers.evmChains[network]!;
    await createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) }).setBalance(
      {
        address: relayer.address,
        value: 10n ** 18n,
      },
    );
  }
});

afterAll(async () => {
  await ifStarted(peers)?.stop();
});

function requirementsOn(network: Network, amount: bigint): PaymentRequirements {
  return {
    scheme: 'exact',
    network,
    maxAmountRequired: amount.toString(),
    resource: 'http://127.0.0.1/paid',
    description: '',
    mimeType: 'application/json',
    payTo: peers.wallets.target.evm.address,
    maxTimeoutSeconds: 120,
    asset: NETWORK_TABLE[network].usdc,
    extra: { ...NETWORK_TABLE[network].eip712 },
  };
}

async function settle(network: Network, authorization: Awaited<ReturnType<typeof sign>>): Promise<Hash> {
  const chain = peers.evmChains[network]!;
  const wallet = createWalletClient({ account: relayer, chain: chain.chain, transport: localTransport(chain.rpcUrl) });
  const { from, to, value, validAfter, validBefore, nonce } = authorization.authorization;
  const hash = await wallet.writeContract({
    address: getAddress(NETWORK_TABLE[network].usdc),
    abi: usdcAbi,
    functionName: 'transferWithAuthorization',
    args: [from, to, value, validAfter, validBefore, nonce, authorization.payment.payload.signature as Hex],
  });
  const receipt = await chain.publicClient.waitForTransactionReceipt({ hash, timeout: 15_000, pollingInterval: 20 });
  expect(receipt.status).toBe('success');
  return hash;
}

async function sign(network: Network, amount: bigint) {
  const signed = await chains.signTransferAuthorization(requirementsOn(network, amount), { now: new Date() });
  if (!signed.ok) throw new Error(`${signed.reason}: ${signed.details}`);
  return signed.value;
}

async function balances(network: Network) {
  const service = await chains.usdcBalance(network, peers.wallets.service.evm.address);
  const target = await chains.usdcBalance(network, peers.wallets.target.evm.address);
  if (!service.ok || !target.ok) throw new Error('balance read failed');
  return { service: service.value, target: target.value };
}

describe.each(NETWORKS)('on %s', (network) => {
  it('settles our authorization on chain and moves exactly the amount', async () => {
    const amount = 123_457n;
    const before = await balances(network);
    expect(before.service).toBe(await peers.usdcBalance(network, peers.wallets.service.evm.address));
    const signed = await sign(network, amount);
    const { address: service, nonce } = { address: signed.authorization.from, nonce: signed.authorization.nonce };

    expect(await chains.authorizationState(network, service, nonce)).toEqual({ ok: true, value: false });
    expect(await chains.findAuthorizationUse(network, service, nonce)).toEqual({
      ok: true,
      value: { state: 'unused' },
    });

    const hash = await settle(network, signed);

    const after = await balances(network);
    expect(before.service - after.service).toBe(amount);
    expect(after.target - before.target).toBe(amount);
    expect(await peers.usdcBalance(network, peers.wallets.target.evm.address)).toBe(after.target);
    expect(await chains.authorizationState(network, service, nonce)).toEqual({ ok: true, value: true });
    const use = await chains.findAuthorizationUse(network, service, nonce);
    expect(use).toEqual({
      ok: true,
      value: { state: 'settled', transactionHash: hash, blockNumber: expect.any(BigInt) },
    });
  });

  it('finds the settling transaction behind later blocks, scanning in small chunks', async () => {
    const signed = await sign(network, 1n);
    const hash = await settle(network, signed);
    const chain = peers.evmChains[network]!;
    await createTestClient({ mode: 'hardhat', chain: chain.chain, transport: localTransport(chain.rpcUrl) }).mine({
      blocks: 25,
    });
    const { from, nonce } = signed.authorization;
    expect(await chains.findAuthorizationUse(network, from, nonce, { chunkBlocks: 4n })).toMatchObject({
      ok: true,
      value: { state: 'settled', transactionHash: hash },
    });
    // Outside a window too small to reach it: the nonce is spent, the event is not in range.
    expect(await chains.findAuthorizationUse(network, from, nonce, { maxBlocks: 10n, chunkBlocks: 4n })).toMatchObject({
      ok: true,
      value: { state: 'used_without_event' },
    });
  });

  it('cannot be settled twice, and a tampered amount does not settle', async () => {
    const signed = await sign(network, 5n);
    await settle(network, signed);
    await expect(settle(network, signed)).rejects.toThrow();
    const other = await sign(network, 5n);
    const tampered = { ...other, authorization: { ...other.authorization, value: 6n } };
    const before = await balances(network);
    await expect(settle(network, tampered)).rejects.toThrow();
    expect(await balances(network)).toEqual(before);
  });
});

describe('reading our target payment back from the chain', () => {
  it('a reported transaction that logs our authorization proves it in one read; anything else takes the full reading', async () => {
    const { readPaymentOnChain } = await import('../../payments/outgoing/chain');
    const network: Network = 'base-sepolia';
    const signed = await sign(network, 1_000n);
    const hash = await settle(network, signed);
    let fullReadings = 0;
    const counting: EvmChains = {
      ...chains,
      networks: chains.networks,
      findAuthorizationUse: (...args: Parameters<EvmChains['findAuthorizationUse']>) => {
        fullReadings += 1;
        return chains.findAuthorizationUse(...args);
      },
      latestBlock: (...args: Parameters<EvmChains['latestBlock']>) => chains.latestBlock(...args),
    };
    const registry = { evm: counting } as unknown as import('../../payments/chains/index').Chains;
    const payment = {
      label: 'test payment',
      network,
      chainType: 'evm' as const,
      payer: peers.wallets.service.evm.address,
      nonce: signed.authorization.nonce,
      payerSignature: null,
      validBefore: signed.authorization.validBefore,
      lastValidBlockHeight: null,
      txHash: null,
    };
    const proven = await readPaymentOnChain(registry, payment, { now: new Date(), reportedTxHash: hash });
    expect(proven).toMatchObject({ state: 'settled', txHash: hash });
    expect(fullReadings).toBe(0);

    // Another payment's transaction does not prove ours: the full reading runs, and finds nothing.
    const other = await sign(network, 1_000n);
    const unused = await readPaymentOnChain(
      registry,
      { ...payment, nonce: other.authorization.nonce },
      { now: new Date(), reportedTxHash: hash },
    );
    expect(unused.state).toBe('open');
    expect(fullReadings).toBe(1);

    // A hash that names no transaction falls back too, and the full reading finds the real one.
    const found = await readPaymentOnChain(registry, payment, {
      now: new Date(),
      reportedTxHash: `0x${'1'.repeat(64)}`,
    });
    expect(found).toMatchObject({ state: 'settled', txHash: hash });
    expect(fullReadings).toBe(2);
  });
});
