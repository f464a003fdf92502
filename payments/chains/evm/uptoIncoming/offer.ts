/**
 * Our 402's `upto` entry on an EVM network we receive on: the client authorizes a maximum and we
 * settle what was used. Written as @x402/evm 2.27's upto server writes it (parsePrice's default
 * conversion, then enhancePaymentRequirements with the facilitator's getExtra): the amount in the
 * stablecoin's atomic units, `extra` {name, version} of its EIP-712 domain, `assetTransferMethod:
 * "permit2"` and `facilitatorAddress`, the account allowed to settle. We are our own facilitator:
 * payTo and facilitatorAddress are both our wallet, which sends the settlement.
 *
 * Upto moves the token through Permit2, so it is offered on a Permit2-only stablecoin (MegaETH's)
 * as on an EIP-3009 one.
 */
import { canonicalNetwork, caip2Of, NETWORK_TABLE } from '../../../basics/networkTable';
import { microToAsset } from '../../../basics/money';
import { fail, ok, type Result } from '../../../basics/result';
import type { PaymentRequirementsV2 } from '../../../x402/v2';
import type { ChainDeps } from '../../types';
import { UPTO_SCHEME } from './payload';

export interface UptoOfferOptions {
  /** The most the client may be charged, in micro-USDC (converted to the stablecoin's decimals exactly or in the client's favour). */
  maximumMicroUsdc: bigint;
  /** How long the client's permit stays valid (its deadline is now + this): the call and our settlement fit in it. */
  maxTimeoutSeconds: number;
}

export type UptoOfferFailureReason = 'network_not_enabled' | 'no_wallet' | 'invalid_amount';

/** The version 2 `accepts` entry offering upto for at most `maximumMicroUsdc` on `network` (a name or CAIP-2 id). */
export function uptoOffer(
  deps: Pick<ChainDeps, 'chains'>,
  networkName: string,
  { maximumMicroUsdc, maxTimeoutSeconds }: UptoOfferOptions,
): Result<PaymentRequirementsV2, UptoOfferFailureReason> {
  const network = canonicalNetwork(networkName);
  const clients = network === undefined ? undefined : deps.chains.evm.networks.get(network);
  if (network === undefined || clients === undefined)
    return fail('network_not_enabled', `${networkName} is not an enabled EVM network`);
  const { eip712, decimals } = NETWORK_TABLE[network];
  if (eip712 === undefined) return fail('network_not_enabled', `${network} has no EIP-712 domain for its stablecoin`);
  const account = deps.chains.evm.account;
  if (account === undefined) return fail('no_wallet', 'EVM_PRIVATE_KEY is not configured');
  if (!Number.isSafeInteger(maxTimeoutSeconds) || maxTimeoutSeconds <= 0)
    return fail('invalid_amount', 'maxTimeoutSeconds is not a positive whole number');
  const maximum = microToAsset(maximumMicroUsdc, decimals);
  if (maximumMicroUsdc <= 0n || maximum <= 0n) return fail('invalid_amount', 'the maximum must be positive');
  return ok({
    scheme: UPTO_SCHEME,
    network: caip2Of(network),
    amount: maximum.toString(),
    asset: clients.usdc,
    payTo: account.address,
    maxTimeoutSeconds,
    extra: {
      name: eip712.name,
      version: eip712.version,
      assetTransferMethod: 'permit2',
      facilitatorAddress: account.address,
    },
  });
}
