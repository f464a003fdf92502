/**
 * The chains this service runs on, built once from Config: the enabled networks, the clients of
 * each family (EVM, Solana), and our wallet's address on each. What a family does with them is in
 * its folder, found through registry.ts. Handlers and
 * jobs receive it as a plain dependency; nothing here is a module-level singleton.
 */
import type { Config, NetworkSettings } from '../basics/config';
import type { PaymentChoice } from '../x402/choose';
import { fail, type Result } from '../basics/result';
import type { ChainNetwork, Chains, PreparedPayment } from './types';
import { FAMILIES } from './registry';
import { createEvmChains, type EvmChains, type EvmOptions, type SignFailureReason } from './evm';
import { createSvmChains, type BuildFailureReason, type SvmChains, type SvmOptions } from './solana';
import { canonicalNetwork, NETWORK_TABLE } from '../basics/networkTable';

export type { ChainNetwork, Chains, PreparedPayment } from './types';

export async function createChains(
  config: Pick<Config, 'networks' | 'evmPrivateKey' | 'solanaPrivateKey'>,
  options: EvmOptions & SvmOptions = {},
): Promise<Chains> {
  const evm = createEvmChains(config, options);
  const svm = await createSvmChains(config, options);
  const networks: ChainNetwork[] = config.networks.map((settings) => {
    const entry = NETWORK_TABLE[settings.name];
    return {
      name: settings.name,
      chainType: entry.chainType,
      networkClass: entry.networkClass,
      chainId: entry.chainId,
      usdc: settings.usdc,
      rpcUrl: settings.rpcUrl,
      serviceAddress: FAMILIES[entry.chainType].serviceAddress({ evm, svm }),
    };
  });
  const byName = new Map(networks.map((network) => [network.name, network] as const));

  function network(name: string): ChainNetwork | undefined {
    const canonical = canonicalNetwork(name);
    return canonical === undefined ? undefined : byName.get(canonical);
  }

  function payingNetworks(): NetworkSettings[] {
    return networks
      .filter((candidate) => candidate.serviceAddress !== undefined)
      .map(({ name, rpcUrl, usdc }) => ({ name, rpcUrl, usdc }));
  }

  async function createPayment(
    choice: PaymentChoice,
    { now, nonce }: { now: Date; nonce?: `0x${string}` },
  ): Promise<Result<PreparedPayment, SignFailureReason | BuildFailureReason>> {
    // A choice is plain data a caller may have built itself: its chain type is checked, not trusted.
    const family = Object.hasOwn(FAMILIES, choice.chainType) ? FAMILIES[choice.chainType] : undefined;
    if (family === undefined) return fail('invalid_requirements', `unknown chain type of ${choice.network}`);
    return (await family.signPayment(chains, choice, { now, ...(nonce === undefined ? {} : { nonce }) })) as Result<
      PreparedPayment,
      SignFailureReason | BuildFailureReason
    >;
  }

  // viem's http transport and kit's RPC hold no sockets of their own between requests.
  const close = async () => {};

  const chains: Chains = { networks, evm, svm, network, payingNetworks, createPayment, close };
  return chains;
}

export type { EvmChains, SvmChains };
export type { RpcObserver } from './rpcTiming';
