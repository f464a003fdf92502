/**
 * Which of a target's payment requirements we pay (pure: no chain, no clock). An entry is payable
 * when its scheme is exact, or upto in an x402 version 2 402, its network is one we pay on, its
 * asset is that network's USDC, its amount is a positive integer within the caller's ceiling (for
 * upto: its maximum, all of which the target may settle), and its scheme (from the registry the
 * caller gives) accepts its payTo and extra. Among payable entries the caller's network order wins,
 * then the lowest amount, then the target's own order.
 */
import type { NetworkSettings } from '../basics/config';
import {
  canonicalNetwork,
  NETWORK_TABLE,
  type ChainType,
  type NetworkClass,
  type NetworkName,
} from '../basics/networkTable';
import { assetToMicro } from '../basics/money';
import type { OfferV2 } from './parse';
import type { SchemeLookup } from './schemes';
import { type PaymentRequirements } from './types';
import { ok, type Ok } from '../basics/result';

/** Authorizations we sign stay usable this long at most; a target asking for more is refused. */
export const DEFAULT_MAX_TIMEOUT_SECONDS = 3600;
const DIGITS = /^(0|[1-9][0-9]*)$/;

export type RefusalReason =
  | 'unsupported_scheme'
  | 'unknown_network'
  | 'network_not_enabled'
  | 'asset_mismatch'
  | 'unsupported_transfer_method'
  | 'invalid_amount'
  | 'amount_over_ceiling'
  | 'invalid_pay_to'
  | 'missing_fee_payer'
  | 'invalid_fee_payer'
  | 'missing_facilitator'
  | 'invalid_facilitator'
  | 'invalid_channel_terms'
  | 'timeout_too_long';

export interface Refusal {
  /** Position in the list given to chooseRequirement. */
  index: number;
  network: string;
  reason: RefusalReason;
  details: string;
}

export interface PaymentChoice {
  /**
   * The entry as the target sent it (version 1: its network name is echoed in X-PAYMENT), or a
   * version 2 entry in that shape (then `offerV2` is what we echo).
   */
  requirements: PaymentRequirements;
  /** Set when the target asked in x402 version 2: we pay with PAYMENT-SIGNATURE echoing this offer verbatim. */
  offerV2?: OfferV2;
  index: number;
  network: NetworkName;
  chainType: ChainType;
  networkClass: NetworkClass;
  /** The price in micro-USDC; for upto the maximum, of which the target settles what the call used. */
  amountMicroUsdc: bigint;
}

/** The schemes we pay, and the x402 version each may be offered in (upto and batch-settlement exist in version 2 only). */
const PAID_SCHEMES: Readonly<Record<string, readonly (1 | 2)[]>> = {
  exact: [1, 2],
  upto: [2],
  'batch-settlement': [2],
};

/** Whether we pay `choice` by upto: the target settles at most its amount, what the call used. */
export function isUpto(choice: { requirements: Pick<PaymentRequirements, 'scheme'> }): boolean {
  return choice.requirements.scheme === 'upto';
}

/** Whether we pay `choice` through a channel (batch-settlement): a voucher per call, charged what the seller reports. */
export function isChannel(choice: { requirements: Pick<PaymentRequirements, 'scheme'> }): boolean {
  return choice.requirements.scheme === 'batch-settlement';
}

export interface ChoiceOptions {
  /** Networks we can pay on (enabled and with a wallet), with the USDC configured there. */
  networks: readonly NetworkSettings[];
  /** The most we pay for this call, in micro-USDC. */
  maxAmountMicroUsdc: bigint;
  /** Networks to prefer, best first; networks not listed come after, in no particular order among themselves. */
  preferredNetworks?: readonly NetworkName[];
  maxTimeoutSeconds?: number;
  /** The schemes we can pay with, per network (payments/chains/registry.ts). */
  schemes: SchemeLookup;
  /** The x402 version of the 402 the entries come from; default 1. upto is paid in version 2 only. */
  x402Version?: 1 | 2;
}

export type ChoiceFailure = { ok: false; reason: 'no_payable_requirement'; details: string; refusals: Refusal[] };

export function chooseRequirement(
  accepts: readonly PaymentRequirements[],
  options: ChoiceOptions,
): Ok<PaymentChoice> | ChoiceFailure {
  const payable: PaymentChoice[] = [];
  const refusals: Refusal[] = [];
  accepts.forEach((requirements, index) => {
    const judged = judgeRequirement(requirements, index, options);
    if ('reason' in judged) refusals.push({ index, network: requirements.network, ...judged });
    else payable.push(judged);
  });
  const preference = options.preferredNetworks ?? [];
  const rank = (network: NetworkName) => {
    const position = preference.indexOf(network);
    return position === -1 ? preference.length : position;
  };
  payable.sort(
    (a, b) =>
      rank(a.network) - rank(b.network) ||
      (a.amountMicroUsdc < b.amountMicroUsdc ? -1 : a.amountMicroUsdc > b.amountMicroUsdc ? 1 : 0) ||
      a.index - b.index,
  );
  const [best] = payable;
  if (best === undefined) {
    const details =
      accepts.length === 0
        ? 'the target offers no payment option'
        : `no payable option: ${refusals.map((refusal) => `#${refusal.index} ${refusal.network}: ${refusal.reason}`).join('; ')}`;
    return { ok: false, reason: 'no_payable_requirement', details, refusals };
  }
  return ok(best);
}

function judgeRequirement(
  requirements: PaymentRequirements,
  index: number,
  options: ChoiceOptions,
): PaymentChoice | { reason: RefusalReason; details: string } {
  const refuse = (reason: RefusalReason, details: string) => ({ reason, details });
  const versions = Object.hasOwn(PAID_SCHEMES, requirements.scheme) ? PAID_SCHEMES[requirements.scheme] : undefined;
  if (versions === undefined)
    return refuse('unsupported_scheme', `scheme "${requirements.scheme}" is none of exact, upto and batch-settlement`);
  const x402Version = options.x402Version ?? 1;
  if (!versions.includes(x402Version))
    return refuse(
      'unsupported_scheme',
      `scheme "${requirements.scheme}" is paid only in x402 version ${versions.join(' or ')}, not in version ${x402Version}`,
    );
  const network = canonicalNetwork(requirements.network);
  if (network === undefined) return refuse('unknown_network', `unknown network "${requirements.network}"`);
  const settings = options.networks.find((candidate) => candidate.name === network);
  if (settings === undefined) return refuse('network_not_enabled', `we do not pay on ${network}`);
  const { chainType, networkClass } = NETWORK_TABLE[network];
  const scheme = options.schemes.scheme(network, requirements.scheme);
  if (scheme === undefined)
    return refuse('unsupported_scheme', `no ${requirements.scheme} scheme is registered for ${network}`);

  if (!scheme.sameAsset(requirements.asset, settings.usdc))
    return refuse('asset_mismatch', `asset ${requirements.asset} is not USDC on ${network} (${settings.usdc})`);
  const transferMethod = offeredTransferMethod(requirements, network, scheme.defaultTransferMethod);
  if (!(scheme.transferMethods as readonly string[]).includes(transferMethod)) {
    const { symbol } = NETWORK_TABLE[network];
    return refuse(
      'unsupported_transfer_method',
      `${symbol} on ${network} is paid by the ${transferMethod} transfer method, which this service does not pay with (it pays by ${scheme.transferMethods.join(', ')})`,
    );
  }

  if (!DIGITS.test(requirements.maxAmountRequired))
    return refuse('invalid_amount', 'maxAmountRequired is not an integer');
  // The target's price in its asset's atomic units, counted in micro-USDC by the asset's decimals.
  const amountMicroUsdc = assetToMicro(BigInt(requirements.maxAmountRequired), NETWORK_TABLE[network].decimals);
  if (amountMicroUsdc <= 0n) return refuse('invalid_amount', 'maxAmountRequired is zero (or under a micro-USDC)');
  if (amountMicroUsdc > options.maxAmountMicroUsdc) {
    return refuse(
      'amount_over_ceiling',
      `${amountMicroUsdc} micro-USDC is over the ceiling of ${options.maxAmountMicroUsdc}`,
    );
  }

  const maxTimeoutSeconds = options.maxTimeoutSeconds ?? DEFAULT_MAX_TIMEOUT_SECONDS;
  if (requirements.maxTimeoutSeconds > maxTimeoutSeconds) {
    return refuse(
      'timeout_too_long',
      `maxTimeoutSeconds ${requirements.maxTimeoutSeconds} is over ${maxTimeoutSeconds}`,
    );
  }

  const recipientProblem = scheme.recipientProblem(requirements);
  if (recipientProblem) return recipientProblem;
  return { requirements, index, network, chainType, networkClass, amountMicroUsdc };
}

/** The transfer method an offer asks for: its `extra.assetTransferMethod` (@x402/evm), else its scheme's, else its network's. */
function offeredTransferMethod(
  requirements: PaymentRequirements,
  network: NetworkName,
  schemeDefault: string | undefined,
): string {
  const named = requirements.extra?.assetTransferMethod;
  if (typeof named === 'string' && named !== '') return named;
  return schemeDefault ?? NETWORK_TABLE[network].transferMethod;
}
