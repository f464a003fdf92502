/**
 * The requirements of our own 402 in relay mode: one entry per network, payTo = our wallet there,
 * asset = its USDC, maxAmountRequired = our price. They carry extra, description and mimeType, as
 * standard clients require, from the family of each network (EVM: the EIP-712 name and version of
 * USDC; Solana: the fee payer, which is our wallet when we settle directly and the facilitator's
 * when it settles).
 */
import type { Chains } from '../chains/index';
import { familyOf } from '../chains/registry';
import { NETWORK_NAMES, NETWORK_TABLE, type NetworkClass, type NetworkName } from '../basics/networkTable';
import { microToAsset } from '../basics/money';
import { type PaymentRequirements } from '../x402/types';
import { fail, ok, type Result } from '../basics/result';
import type { FacilitatorAuth } from '../basics/facilitatorAuth';
import { facilitatorFeePayer } from './facilitator';

/** How long a client's authorization should stay valid: our verification, settlement and the target's payment fit in it. */
export const DEFAULT_RELAY_TIMEOUT_SECONDS = 300;

export interface OfferOptions {
  amountMicroUsdc: bigint;
  resource: string;
  description?: string;
  mimeType?: string;
  maxTimeoutSeconds?: number;
  /** The fee payer a facilitator names in its /supported when it settles and pays the fees (Solana); our wallet otherwise. */
  feePayer?: string;
}

function relayRequirements(
  chains: Chains,
  networkName: string,
  options: OfferOptions,
): Result<PaymentRequirements, 'network_not_enabled' | 'no_wallet' | 'invalid_amount'> {
  const network = chains.network(networkName);
  if (!network) return fail('network_not_enabled', `${networkName} is not enabled`);
  if (!network.serviceAddress) return fail('no_wallet', `no wallet is configured for ${network.name}`);
  // We verify and settle EIP-3009 authorizations and SPL transfers; a stablecoin that moves only
  // through Permit2 (MegaETH's) is one we pay targets in, never one we are paid in.
  if (NETWORK_TABLE[network.name].transferMethod === 'permit2')
    return fail('network_not_enabled', `${network.name} is enabled for paying targets only (Permit2)`);
  if (options.amountMicroUsdc <= 0n) return fail('invalid_amount', 'the price must be positive');
  const extra = familyOf(network.name).offerExtra(network.name, options.feePayer ?? network.serviceAddress);
  return ok({
    scheme: 'exact',
    network: network.name,
    maxAmountRequired: microToAsset(options.amountMicroUsdc, NETWORK_TABLE[network.name].decimals).toString(),
    resource: options.resource,
    description: options.description ?? 'Relay payment',
    mimeType: options.mimeType ?? 'application/json',
    payTo: network.serviceAddress,
    maxTimeoutSeconds: options.maxTimeoutSeconds ?? DEFAULT_RELAY_TIMEOUT_SECONDS,
    asset: network.usdc,
    extra,
  });
}

export interface OffersRequest extends OfferOptions {
  /** The class to offer (the target's class for a relay); ignored when a network is named. */
  networkClass: NetworkClass;
  /** The network the client named in its request, if any: then only that one is offered. */
  namedNetwork?: NetworkName;
  /** Offered first when it is among the offers (a relay target's own network). */
  preferredNetwork?: NetworkName;
}

/**
 * Every entry of our 402 (relay, chat): one per enabled network of the class where we hold a
 * wallet, the preferred network first; or only the network the client named. Networks that
 * standard x402 v1 clients do not know are offered only when named (docs/decisions.md): those
 * clients reject a whole 402 when one entry names a network they do not know.
 */
function offers(chains: Chains, request: OffersRequest): PaymentRequirements[] {
  if (request.amountMicroUsdc <= 0n) throw new RangeError('an offer needs a positive price');
  const order = (name: NetworkName) => (name === request.preferredNetwork ? -1 : NETWORK_NAMES.indexOf(name));
  const candidates =
    request.namedNetwork !== undefined
      ? chains.networks.filter((network) => network.name === request.namedNetwork)
      : chains.networks
          .filter(
            (network) =>
              network.networkClass === request.networkClass && NETWORK_TABLE[network.name].knownToStandardClients,
          )
          .sort((a, b) => order(a.name) - order(b.name));
  return candidates.flatMap((network) => {
    const offer = relayRequirements(chains, network.name, request);
    return offer.ok ? [offer.value] : [];
  });
}

/** GET /supported of the facilitator, asked for the Solana fee payer of our 402. */
const FACILITATOR_SUPPORTED_TIMEOUT_MS = 5_000;

/**
 * Our offers as `offers` makes them, for payments settled through `facilitatorUrl` when one is
 * set: on a family whose settler pays the fees (Solana), a payment is then co-signed by the
 * facilitator's fee payer, not our wallet, so that network is offered with the fee payer the
 * facilitator names, or not at all when it names none.
 */
export async function settleableOffers(
  chains: Chains,
  request: OffersRequest,
  facilitatorUrl: string | undefined,
  /** How we authenticate to that facilitator (FACILITATOR_HEADERS, a CDP API key), when it requires it. */
  facilitatorAuth?: FacilitatorAuth,
): Promise<PaymentRequirements[]> {
  const ours = offers(chains, request);
  if (!facilitatorUrl) return ours;
  const settled = await Promise.all(
    ours.map(async (entry) => {
      const network = entry.network as NetworkName;
      if (!familyOf(network).facilitatorPaysFees) return [entry];
      const feePayer = await facilitatorFeePayer(facilitatorUrl, network, {
        timeoutMs: FACILITATOR_SUPPORTED_TIMEOUT_MS,
        auth: facilitatorAuth,
      });
      if (!feePayer) return [];
      const offer = relayRequirements(chains, network, { ...request, feePayer });
      return offer.ok ? [offer.value] : [];
    }),
  );
  return settled.flat();
}
