/**
 * What every mode that calls a target shares (/proxy, /relay and their simulations): one bounded
 * call through the SSRF-safe client, the reading of its 402, and the choice of the requirement we
 * would pay from the service wallet.
 */
import type { Deps } from '../deps';
import type { Chains } from '../chains/index';
import { familyOf, PAYMENT_SCHEMES } from '../chains/registry';
import { canonicalNetwork, type NetworkName } from '../basics/networkTable';
import {
  sendTargetRequest,
  type OutboundErrorCode,
  type TargetAnswer,
  type TargetRequest,
  type TargetResponse,
} from '../basics/http/index';
import { fail, ok, type Failure, type Result } from '../basics/result';
import { chooseRequirement, isChannel, type PaymentChoice } from '../x402/choose';
import type { SchemeLookup } from '../x402/schemes';
import { readTargetPaymentRequired, type OfferV2, type TargetPaymentRequired } from '../x402/parse';
import { PAYMENT_REQUIRED_HEADER } from '../x402/v2';

/** Refusals of the guard and the request itself: nothing was sent, the client's request is at fault (400). */
const REFUSED_BEFORE_SENDING = new Set<OutboundErrorCode>([
  'invalid_method',
  'conflicting_body_fields',
  'invalid_field',
  'invalid_header',
  'invalid_cookie',
  'invalid_url',
  'unsupported_scheme',
  'ssrf_blocked',
]);

export function isClientError(code: OutboundErrorCode): boolean {
  return REFUSED_BEFORE_SENDING.has(code);
}

/** A request to a target that got no answer, as a caller reports it: the request's fault (a 400) or the target's (a 502). */
export function noAnswer(error: Failure<OutboundErrorCode>): { kind: 'bad_request' | 'bad_gateway'; details: string } {
  return { kind: isClientError(error.reason) ? 'bad_request' : 'bad_gateway', details: error.details };
}

/**
 * The time a caller gave a whole call (its body's `timeout`, X-TIMEOUT, the server's maximum) and
 * what is left of it: each request to the target gets what is left, and a timeout names the
 * caller's bound, not the remainder.
 */
export interface CallBudget {
  boundMs: number;
  remainingMs(): number;
}

export function callBudget(boundMs: number): CallBudget {
  const deadline = performance.now() + boundMs;
  return { boundMs, remainingMs: () => Math.max(1, Math.ceil(deadline - performance.now())) };
}

export async function callTarget(
  request: TargetRequest,
  budget: CallBudget,
  deps: Pick<Deps, 'config' | 'resolver' | 'connections'>,
): Promise<TargetAnswer> {
  return sendTargetRequest(request, {
    timeoutMs: budget.remainingMs(),
    boundMs: budget.boundMs,
    allowHosts: deps.config.ssrfAllowHosts,
    resolver: deps.resolver,
    connections: deps.connections,
  });
}

/**
 * A 402 in x402 form, version 2 (the PAYMENT-REQUIRED header) first, then version 1 (the body), or
 * undefined: any other 402 is an ordinary client error of the target.
 */
export function paymentRequiredOf(response: TargetResponse): TargetPaymentRequired | undefined {
  if (response.status !== 402) return undefined;
  return readTargetPaymentRequired(response.headers[PAYMENT_REQUIRED_HEADER], response.body.toString('utf8'));
}

/**
 * Why we pay nothing: `configuration`, our own setup cannot pay what the target accepts (no wallet
 * key for an enabled network), a 500; `unpayable`, the target asks for nothing we pay (network,
 * amount over the ceiling, ...), a 502; `transfer_method_unsupported`, what the target asks
 * for is ours to pay but moves by a transfer method we do not pay with (Permit2), a 422 naming it;
 * `asset_unsupported`, the target asks on a network we pay on for a token we do not hold there
 * (not the stablecoin configured for it: an EVM token or a Solana mint), a 422 naming it;
 * `network_not_offered`, the network the caller named is not among the target's payable options
 * (simulation only), a 400.
 */
export type PaymentDecision = Result<
  PaymentChoice,
  'configuration' | 'unpayable' | 'transfer_method_unsupported' | 'asset_unsupported' | 'network_not_offered'
>;

/**
 * A target's offer refused by name before anything is signed or moved (a 422): its asset is not
 * the token we hold on its network, or its payTo has no account to receive it (Solana).
 */
export interface OfferRefused {
  kind: 'asset_unsupported' | 'pay_to_account_missing';
  details: string;
}

/**
 * The chosen offer's payTo read from its chain: why it cannot receive our payment
 * (ChainFamily.recipientAccountProblem), or undefined. Nothing is signed.
 */
export async function recipientRefusal(chains: Chains, choice: PaymentChoice): Promise<OfferRefused | undefined> {
  const problem = await familyOf(choice.network).recipientAccountProblem(chains, choice);
  return problem === undefined ? undefined : { kind: problem.reason, details: problem.details };
}

/** A target's offer that moves its asset by a transfer method we do not pay with: a 422 naming it, nothing moved. */
export interface TransferMethodUnsupported {
  kind: 'transfer_method_unsupported';
  details: string;
}

/** The schemes we pay with, less batch-settlement: for the modes that do not pay through channels. */
const WITHOUT_CHANNELS: SchemeLookup = {
  scheme: (network, scheme) =>
    isChannel({ requirements: { scheme } }) ? undefined : PAYMENT_SCHEMES.scheme(network, scheme),
  schemeOfPayload: (payload) => PAYMENT_SCHEMES.schemeOfPayload(payload),
};

/**
 * A decision that pays nothing and names what the target asks that we do not pay (a 422 each:
 * its transfer method, its asset), as every caller reports it; undefined for the other reasons,
 * which each caller words its own way.
 */
export function namedRefusal(
  decision: Extract<PaymentDecision, { ok: false }>,
): TransferMethodUnsupported | { kind: 'asset_unsupported'; details: string } | undefined {
  if (decision.reason === 'transfer_method_unsupported')
    return { kind: 'transfer_method_unsupported', details: decision.details };
  if (decision.reason === 'asset_unsupported') return { kind: 'asset_unsupported', details: decision.details };
  return undefined;
}

/**
 * The requirement we would pay: exact scheme (or upto in version 2), an enabled network where we hold a key, that
 * network's USDC, at most `maxAmountMicroUsdc` (the mode's ceiling). `network`, when named, is the
 * only one considered.
 */
export function decidePayment(
  body: Pick<TargetPaymentRequired, 'accepts'> & { offers?: readonly OfferV2[] },
  {
    chains,
    maxAmountMicroUsdc,
    network,
    channels = false,
  }: {
    chains: Chains;
    maxAmountMicroUsdc: bigint;
    network?: NetworkName;
    /** Whether the caller pays through batch-settlement channels (/proxy and its dry run do; /relay not yet). */
    channels?: boolean;
  },
): PaymentDecision {
  const paying = chains.payingNetworks();
  const networks = network === undefined ? paying : paying.filter((candidate) => candidate.name === network);
  // Only a version 2 402 carries its entries verbatim (offers): only there is upto offered.
  const choice = chooseRequirement(body.accepts, {
    networks,
    maxAmountMicroUsdc,
    schemes: channels ? PAYMENT_SCHEMES : WITHOUT_CHANNELS,
    x402Version: body.offers === undefined ? 1 : 2,
  });
  if (choice.ok) {
    // A version 2 offer is paid in version 2: the entry chosen is echoed verbatim.
    const offerV2 = body.offers?.[choice.value.index];
    return ok(offerV2 === undefined ? choice.value : { ...choice.value, offerV2 });
  }
  if (network !== undefined && !body.accepts.some((entry) => canonicalNetwork(entry.network) === network)) {
    return fail('network_not_offered', `the target does not accept payment on ${network}`);
  }
  const missingWallet = choice.refusals.find((refusal) => {
    if (refusal.reason !== 'network_not_enabled') return false;
    if (network !== undefined && canonicalNetwork(refusal.network) !== network) return false;
    const enabled = chains.network(refusal.network);
    return enabled !== undefined && enabled.serviceAddress === undefined;
  });
  if (missingWallet) {
    return fail(
      'configuration',
      `no service wallet is configured for ${canonicalNetwork(missingWallet.network)}, the network the target accepts`,
    );
  }
  const method = choice.refusals.find((refusal) => refusal.reason === 'unsupported_transfer_method');
  if (method) return fail('transfer_method_unsupported', `the target's payment cannot be made: ${method.details}`);
  const assets = choice.refusals.filter((refusal) => refusal.reason === 'asset_mismatch');
  if (assets.length > 0) {
    return fail(
      'asset_unsupported',
      `the target asks to be paid in a token this service does not hold: ${assets.map((refusal) => refusal.details).join('; ')}`,
    );
  }
  return fail('unpayable', `the target's payment requirements cannot be paid: ${choice.details}`);
}

/** The target's body for a JSON field: parsed when it is JSON, otherwise its text. */
export function bodyValue(response: TargetResponse): unknown {
  const text = response.body.toString('utf8');
  const contentType = String(response.headers['content-type'] ?? '').toLowerCase();
  if (contentType.includes('json') || /^\s*[[{]/.test(text)) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }
  return text;
}
