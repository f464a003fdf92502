// The network registry built from Config (no chain): which networks are EVM or Solana, our address
// on each, and which ones the requirement choice may pick from (enabled and with a key).
import { privateKeyToAccount } from 'viem/accounts';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../payments/basics/config';
import { createChains } from '../../payments/chains/index';
import { chooseRequirement } from '../../payments/x402/choose';
import { generateSolanaKey } from '../../devnet/svm/keys';
import { PAYMENT_SCHEMES } from '../../payments/chains/registry';

const EVM_KEY = '0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318';
const EVM_ADDRESS = privateKeyToAccount(EVM_KEY).address;

describe('createChains', () => {
  it('describes every enabled network with its chain type, class and our address there', async () => {
    const solana = await generateSolanaKey();
    const config = loadConfig({
      EVM_PRIVATE_KEY: EVM_KEY,
      SOLANA_PRIVATE_KEY: solana.secretKeyBase58,
      RPC_URL_BASE: 'http://127.0.0.1:8545',
    });
    const chains = await createChains(config);
    expect(
      chains.networks.map(({ name, chainType, networkClass, chainId, serviceAddress }) => [
        name,
        chainType,
        networkClass,
        chainId,
        serviceAddress,
      ]),
    ).toEqual([
      ['base', 'evm', 'mainnet', 8453, EVM_ADDRESS],
      ['base-sepolia', 'evm', 'testnet', 84532, EVM_ADDRESS],
      ['skale-base', 'evm', 'mainnet', 1187947933, EVM_ADDRESS],
      ['skale-base-sepolia', 'evm', 'testnet', 324705682, EVM_ADDRESS],
      ['solana', 'solana', 'mainnet', undefined, solana.address],
      ['solana-devnet', 'solana', 'testnet', undefined, solana.address],
    ]);
    expect(chains.network('base')?.rpcUrl).toBe('http://127.0.0.1:8545');
    expect(chains.evm.networks.get('base')?.chain.rpcUrls.default.http).toEqual(['http://127.0.0.1:8545']);
    expect(chains.network('solana-mainnet-beta')?.name).toBe('solana');
    expect(chains.network('solana-mainnet')?.name).toBe('solana');
    expect(chains.network('polygon')).toBeUndefined();
    expect([...chains.evm.networks.keys()]).toEqual(['base', 'base-sepolia', 'skale-base', 'skale-base-sepolia']);
    expect([...chains.svm.networks.keys()]).toEqual(['solana', 'solana-devnet']);
    await chains.close();
  });

  it('offers for payment only enabled networks where we hold a key', async () => {
    const config = loadConfig({ EVM_PRIVATE_KEY: EVM_KEY, NETWORKS: 'base-sepolia,solana-devnet' });
    const chains = await createChains(config);
    expect(chains.network('base')).toBeUndefined();
    expect(chains.payingNetworks().map((settings) => settings.name)).toEqual(['base-sepolia']);
    const solanaEntry = {
      scheme: 'exact',
      network: 'solana-devnet',
      maxAmountRequired: '10',
      resource: 'http://127.0.0.1/paid',
      description: '',
      mimeType: '',
      payTo: '9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin',
      maxTimeoutSeconds: 60,
      asset: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
      extra: { feePayer: '2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4' },
    };
    const choice = chooseRequirement([solanaEntry], {
      schemes: PAYMENT_SCHEMES,
      networks: chains.payingNetworks(),
      maxAmountMicroUsdc: 100n,
    });
    expect(choice).toMatchObject({ ok: false, refusals: [{ reason: 'network_not_enabled' }] });
    // Asked directly, the Solana side answers that it has no wallet rather than failing later.
    const enabled = chooseRequirement([solanaEntry], {
      schemes: PAYMENT_SCHEMES,
      networks: config.networks,
      maxAmountMicroUsdc: 100n,
    });
    if (!enabled.ok) throw new Error(enabled.details);
    expect(await chains.createPayment(enabled.value, { now: new Date() })).toMatchObject({
      ok: false,
      reason: 'no_wallet',
    });
  });

  it('stops with a message naming the variable when a key is unusable', async () => {
    await expect(createChains(loadConfig({ SOLANA_PRIVATE_KEY: '1'.repeat(88) }))).rejects.toThrow(
      /SOLANA_PRIVATE_KEY/,
    );
    await expect(createChains(loadConfig({ EVM_PRIVATE_KEY: `0x${'0'.repeat(64)}` }))).rejects.toThrow(
      /EVM_PRIVATE_KEY/,
    );
  });
});
