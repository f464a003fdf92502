/**
 * The registry of chain families and payment schemes, in the spirit of @x402/core's
 * `register(network, scheme)`: a scheme is registered for a network pattern (`eip155:*`, `solana:*`,
 * or one CAIP-2 id), and a network's family is named by its row in the network table. The flows ask
 * here and never branch on a family. A new family is a folder beside evm/ and solana/, one entry in
 * FAMILIES and one `register` call; a new scheme on a family is one `register` call.
 */
import { caip2Of, canonicalNetwork, NETWORK_TABLE, type ChainType, type NetworkName } from '../basics/networkTable';
import type { PaymentRequirementsV2 } from '../x402/v2';
import type { PaymentScheme, SchemeLookup, SchemePayload } from '../x402/schemes';
import { BATCH_SETTLEMENT_EVM } from './evm/batchSettlement/scheme';
import { EXACT_EVM } from './evm/exact';
import { EVM_FAMILY } from './evm/family';
import { UPTO_EVM } from './evm/upto';
import type { ChainFamily } from './family';
import type { Chains } from './types';
import type { UptoIncoming } from './uptoIncoming';
import type { uptoOffer } from './evm/uptoIncoming/offer';
import { EXACT_SOLANA } from './solana/exact';
import { SOLANA_FAMILY } from './solana/family';

/** Schemes by network pattern: the first registration that matches a network and a scheme name wins. */
export class SchemeRegistry implements SchemeLookup {
  private readonly entries: { pattern: string; scheme: PaymentScheme }[] = [];

  register(pattern: string, scheme: PaymentScheme): this {
    this.entries.push({ pattern, scheme });
    return this;
  }

  scheme(network: NetworkName, scheme: string): PaymentScheme | undefined {
    const caip2 = caip2Of(network);
    const namespace = caip2.slice(0, caip2.indexOf(':'));
    return this.entries.find(
      (entry) => (entry.pattern === caip2 || entry.pattern === `${namespace}:*`) && entry.scheme.scheme === scheme,
    )?.scheme;
  }

  schemeOfPayload(payload: SchemePayload): PaymentScheme | undefined {
    return this.entries.find((entry) => entry.scheme.recognizes(payload))?.scheme;
  }
}

export const FAMILIES: Readonly<Record<ChainType, ChainFamily>> = { evm: EVM_FAMILY, solana: SOLANA_FAMILY };

/** Every scheme we pay and are paid with, by network. */
export const PAYMENT_SCHEMES = new SchemeRegistry()
  .register('eip155:*', EXACT_EVM)
  .register('eip155:*', UPTO_EVM)
  .register('eip155:*', BATCH_SETTLEMENT_EVM)
  .register('solana:*', EXACT_SOLANA);

/** The family of a network, as its row in the network table names it. */
export function familyOf(network: NetworkName): ChainFamily {
  return FAMILIES[NETWORK_TABLE[network].chainType];
}

/** Resolves when the network's RPC answered within `timeoutMs`; rejects with the reason otherwise. */
export async function checkRpcReachable(chains: Chains, network: NetworkName, timeoutMs: number): Promise<void> {
  return familyOf(network).checkReachable(chains, network, timeoutMs);
}

/** The upto side of a network's family, if it takes upto payments. */
export function uptoIncomingOn(network: string): UptoIncoming | undefined {
  const name = canonicalNetwork(network);
  return name === undefined ? undefined : familyOf(name).uptoIncoming;
}

/**
 * Our upto entries on these networks (those whose family takes upto), each for at most
 * `maximumMicroUsdc`; a network where no offer can be made is left out.
 */
export function uptoOffers(
  deps: Parameters<typeof uptoOffer>[0],
  networks: readonly NetworkName[],
  options: Parameters<typeof uptoOffer>[2],
): PaymentRequirementsV2[] {
  return networks.flatMap((network) => {
    const offered = familyOf(network).uptoIncoming?.offer(deps, network, options);
    return offered?.ok ? [offered.value] : [];
  });
}
