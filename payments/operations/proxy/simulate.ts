/**
 * POST /proxy/sim: the target is called once without payment, and the answer says what /proxy
 * would pay and charge. No credit is reserved and nothing is signed.
 */
import type { Deps } from '../../deps';
import { proxyCredits, proxyPricing, type Pricing } from '../../accounts/fees';
import { proxySchemeOf } from './records';
import { parseUsdc } from '../../basics/money';
import { canonicalNetwork } from '../../basics/networkTable';
import { buildTargetRequest, type CallRequest } from '../../basics/http/index';
import type { PaymentRequirements } from '../../x402/types';
import { withBazaar } from '../../x402/extensions';
import { hostRefusal, priceRefusal, type CallLimits, type LimitRefusal } from '../../accounts/policy';
import {
  bodyValue,
  callBudget,
  callTarget,
  decidePayment,
  namedRefusal,
  noAnswer,
  paymentRequiredOf,
  recipientRefusal,
  type OfferRefused,
  type TransferMethodUnsupported,
} from '../../outgoing/index';

/** What /proxy would pay and charge, in atomic units: the handler writes them in USDC. */
export interface ProxyFeeBreakdown {
  targetMicroUsdc: bigint;
  feeMicroUsdc: bigint;
  totalMicroUsdc: bigint;
  totalCredits: bigint;
}

export type ProxySimulation =
  | { requiresPayment: false; status: number; response: unknown }
  | {
      requiresPayment: true;
      status: number;
      response: unknown;
      paymentRequirements: PaymentRequirements & { scheme: 'exact' | 'upto' | 'batch-settlement' };
      /** For upto: of the maximum (what is held); the charge follows what the target settles. */
      feeBreakdown: ProxyFeeBreakdown;
      /** The target's bazaar discovery metadata, when its version 2 402 declares it (bounded). */
      bazaar?: Record<string, unknown>;
      pricing: Pricing;
    };

export type SimulationOutcome =
  | { kind: 'result'; result: ProxySimulation }
  | { kind: 'bad_request'; details: string }
  | LimitRefusal
  | TransferMethodUnsupported
  | OfferRefused
  | { kind: 'bad_gateway'; details: string }
  | { kind: 'configuration_error'; details: string };

function proxyFeeBreakdown(amountMicroUsdc: bigint, proxyFeePercent: number): ProxyFeeBreakdown {
  const { totalCredits, totalMicro, feeMicro } = proxyCredits(amountMicroUsdc, proxyFeePercent);
  return { targetMicroUsdc: amountMicroUsdc, feeMicroUsdc: feeMicro, totalMicroUsdc: totalMicro, totalCredits };
}

export async function simulateProxyCall(
  deps: Pick<Deps, 'config' | 'chains' | 'resolver' | 'connections'>,
  { call, timeoutMs, limits = {} }: { call: CallRequest; timeoutMs: number; limits?: CallLimits },
): Promise<SimulationOutcome> {
  const built = buildTargetRequest(call);
  if (!built.ok) return { kind: 'bad_request', details: built.details };
  const refusedHost = hostRefusal(limits, call.api_url);
  if (refusedHost) return refusedHost;
  const answer = await callTarget(built.value, callBudget(timeoutMs), deps);
  if (!answer.ok) return noAnswer(answer);
  const { value: response } = answer;
  if (response.status >= 500) return { kind: 'bad_gateway', details: `the target answered ${response.status}` };
  const required = paymentRequiredOf(response);
  if (!required)
    return {
      kind: 'result',
      result: { requiresPayment: false, status: response.status, response: bodyValue(response) },
    };

  const network = call.network === undefined ? undefined : canonicalNetwork(call.network);
  const decision = decidePayment(required, {
    chains: deps.chains,
    maxAmountMicroUsdc: parseUsdc(deps.config.proxyMaxPaymentUsdc),
    ...(network ? { network } : {}),
    channels: true,
  });
  if (!decision.ok) {
    if (decision.reason === 'network_not_offered') return { kind: 'bad_request', details: decision.details };
    const named = namedRefusal(decision);
    if (named) return named;
    return decision.reason === 'configuration'
      ? { kind: 'configuration_error', details: decision.details }
      : { kind: 'bad_gateway', details: decision.details };
  }
  const refusedPrice = priceRefusal(limits, decision.value.amountMicroUsdc, decision.value.network);
  if (refusedPrice) return refusedPrice;
  const refusedRecipient = await recipientRefusal(deps.chains, decision.value);
  if (refusedRecipient) return refusedRecipient;
  return {
    kind: 'result',
    result: {
      requiresPayment: true,
      status: response.status,
      response: bodyValue(response),
      // The choice only keeps exact, upto and batch-settlement entries.
      paymentRequirements: { ...decision.value.requirements, scheme: proxySchemeOf(decision.value) },
      feeBreakdown: proxyFeeBreakdown(decision.value.amountMicroUsdc, deps.config.proxyFeePercent),
      ...withBazaar(required),
      pricing: proxyPricing(proxySchemeOf(decision.value), decision.value.amountMicroUsdc, deps.config.proxyFeePercent),
    },
  };
}
