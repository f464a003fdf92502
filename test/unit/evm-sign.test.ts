// EIP-3009 authorizations signed by the service wallet, checked with viem's verifyTypedData against
// domains built from the harness's independent network table (no chain).
import { verifyTypedData, type Address, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import type { NetworkSettings } from '../../payments/basics/config';
import { createEvmChains, transferWithAuthorizationTypes, type TransferAuthorization } from '../../payments/chains/evm';
import { decodePaymentHeader } from '../../payments/x402/headers';
import type { PaymentRequirements } from '../../payments/x402/types';
import { EVM_NETWORKS, type EvmNetworkName } from '../../devnet/networks';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const TEST_KEY: Hex = '0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318';
const SERVICE = privateKeyToAccount(TEST_KEY).address;
const PAY_TO: Address = '0x209693Bc6afc0C5328bA36FaF03C514EF312287C';
const NOW = new Date('2026-03-01T12:00:00.500Z');
const NOW_SECONDS = 1_772_366_400n;

const networks: NetworkSettings[] = (Object.keys(EVM_NETWORKS) as EvmNetworkName[]).map((name) => ({
  name,
  rpcUrl: 'http://127.0.0.1:9',
  usdc: EVM_NETWORKS[name].usdc,
}));

function requirementsOn(network: EvmNetworkName, changes: Partial<PaymentRequirements> = {}): PaymentRequirements {
  return {
    scheme: 'exact',
    network,
    maxAmountRequired: '12345',
    resource: 'http://127.0.0.1:4021/paid',
    description: 'paid route',
    mimeType: 'application/json',
    payTo: PAY_TO,
    maxTimeoutSeconds: 60,
    asset: EVM_NETWORKS[network].usdc,
    extra: { ...EVM_NETWORKS[network].eip712 },
    ...changes,
  };
}

/** The domain as the USDC contract of that network computes it, from the harness's own table. */
function referenceDomain(network: EvmNetworkName) {
  const { chainId, usdc, eip712 } = EVM_NETWORKS[network];
  return { name: eip712.name, version: eip712.version, chainId, verifyingContract: usdc as Address };
}

async function signOn(network: EvmNetworkName, changes: Partial<PaymentRequirements> = {}) {
  const chains = createEvmChains({ networks, evmPrivateKey: TEST_KEY });
  const signed = await chains.signTransferAuthorization(requirementsOn(network, changes), { now: NOW });
  if (!signed.ok) throw new Error(`${signed.reason}: ${signed.details}`);
  return signed.value;
}

function verify(
  network: EvmNetworkName,
  signature: Hex,
  message: TransferAuthorization,
  domain = referenceDomain(network),
) {
  return verifyTypedData({
    address: SERVICE,
    domain,
    types: transferWithAuthorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message,
    signature,
  });
}

describe('signTransferAuthorization', () => {
  it.each(['base-sepolia', 'skale-base-sepolia', 'base', 'skale-base'] as const)(
    'signs what %s USDC verifies: exact value, payTo, time window, 32-byte nonce',
    async (network) => {
      const { payment, header, authorization } = await signOn(network);
      expect(authorization).toEqual({
        from: SERVICE,
        to: PAY_TO,
        value: 12_345n,
        validAfter: NOW_SECONDS - 600n,
        validBefore: NOW_SECONDS + 60n,
        nonce: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      });
      expect(payment).toEqual({
        x402Version: 1,
        scheme: 'exact',
        network,
        payload: {
          signature: expect.stringMatching(/^0x[0-9a-f]{130}$/),
          authorization: {
            from: SERVICE,
            to: PAY_TO,
            value: '12345',
            validAfter: (NOW_SECONDS - 600n).toString(),
            validBefore: (NOW_SECONDS + 60n).toString(),
            nonce: authorization.nonce,
          },
        },
      });
      expect(decodePaymentHeader(header, PAYMENT_SCHEMES)).toEqual({ ok: true, value: payment });
      expect(await verify(network, payment.payload.signature as Hex, authorization)).toBe(true);
    },
  );

  it('fails verification when any signed field is changed', async () => {
    const { payment, authorization } = await signOn('base-sepolia');
    const signature = payment.payload.signature as Hex;
    expect(await verify('base-sepolia', signature, { ...authorization, value: authorization.value + 1n })).toBe(false);
    expect(await verify('base-sepolia', signature, { ...authorization, to: SERVICE })).toBe(false);
    expect(
      await verify('base-sepolia', signature, { ...authorization, validBefore: authorization.validBefore + 1n }),
    ).toBe(false);
    // The same message under another network's domain: a signature for base-sepolia is not valid on skale-base-sepolia.
    expect(await verify('skale-base-sepolia', signature, authorization)).toBe(false);
    expect(
      await verify('base-sepolia', signature, authorization, { ...referenceDomain('base-sepolia'), chainId: 8453 }),
    ).toBe(false);
  });

  it('falls back to our table when extra has no name or version, and follows extra when it has one', async () => {
    const fallback = await signOn('skale-base-sepolia', { extra: {} });
    expect(await verify('skale-base-sepolia', fallback.payment.payload.signature as Hex, fallback.authorization)).toBe(
      true,
    );
    const renamed = await signOn('base-sepolia', { extra: { name: 'USD Coin', version: '2' } });
    const signature = renamed.payment.payload.signature as Hex;
    expect(await verify('base-sepolia', signature, renamed.authorization)).toBe(false);
    expect(
      await verify('base-sepolia', signature, renamed.authorization, {
        ...referenceDomain('base-sepolia'),
        name: 'USD Coin',
      }),
    ).toBe(true);
  });

  it('uses a fresh nonce for every authorization', async () => {
    const nonces = new Set<string>();
    for (let round = 0; round < 20; round++) nonces.add((await signOn('base-sepolia')).authorization.nonce);
    expect(nonces.size).toBe(20);
  });

  it('checksums a lower-case payTo and asset', async () => {
    const { authorization } = await signOn('base-sepolia', {
      payTo: PAY_TO.toLowerCase(),
      asset: EVM_NETWORKS['base-sepolia'].usdc.toLowerCase(),
    });
    expect(authorization.to).toBe(PAY_TO);
  });

  it('refuses what it must not sign', async () => {
    const chains = createEvmChains({ networks, evmPrivateKey: TEST_KEY });
    const sign = (requirements: PaymentRequirements) => chains.signTransferAuthorization(requirements, { now: NOW });
    expect(await sign(requirementsOn('base-sepolia', { asset: EVM_NETWORKS.base.usdc }))).toMatchObject({
      ok: false,
      reason: 'asset_mismatch',
    });
    expect(
      await sign(requirementsOn('base-sepolia', { payTo: '0x0000000000000000000000000000000000000000' })),
    ).toMatchObject({
      ok: false,
      reason: 'invalid_requirements',
    });
    expect(await sign(requirementsOn('base-sepolia', { maxAmountRequired: '0' }))).toMatchObject({
      ok: false,
      reason: 'invalid_requirements',
    });
    expect(await sign({ ...requirementsOn('base-sepolia'), network: 'solana-devnet' })).toMatchObject({
      ok: false,
      reason: 'not_evm_network',
    });
    const onlyBase = createEvmChains({
      networks: networks.filter((settings) => settings.name === 'base'),
      evmPrivateKey: TEST_KEY,
    });
    expect(await onlyBase.signTransferAuthorization(requirementsOn('base-sepolia'), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'network_not_enabled',
    });
    const keyless = createEvmChains({ networks, evmPrivateKey: undefined });
    expect(await keyless.signTransferAuthorization(requirementsOn('base-sepolia'), { now: NOW })).toMatchObject({
      ok: false,
      reason: 'no_wallet',
    });
  });

  it('builds each network client on our chain id and the configured RPC URL', () => {
    const chains = createEvmChains({ networks, evmPrivateKey: TEST_KEY });
    for (const network of Object.keys(EVM_NETWORKS) as EvmNetworkName[]) {
      const clients = chains.networks.get(network)!;
      expect(clients.chain.id).toBe(EVM_NETWORKS[network].chainId);
      expect(clients.chain.rpcUrls.default.http).toEqual(['http://127.0.0.1:9']);
      expect(clients.walletClient?.account.address).toBe(SERVICE);
    }
  });

  it('answers rpc_error or rpc_timeout, never throws, when the RPC endpoint is down', async () => {
    const chains = createEvmChains({ networks, evmPrivateKey: TEST_KEY }, { rpcTimeoutMs: 500 });
    const balance = await chains.usdcBalance('base-sepolia', SERVICE);
    expect(balance).toMatchObject({ ok: false, reason: expect.stringMatching(/^rpc_(error|timeout)$/) });
  });
});
