import type { Handler, RequestContext } from './types';
import type { Deps } from './deps';
import { relayFeeModelText, relayPricing } from '../payments/accounts/fees';
import { isChannel, isUpto } from '../payments/x402/choose';
import { pricingBody } from './pricing';
import { microToUsdc } from '../payments/basics/money';
import { callBudget } from '../payments/outgoing/index';
import { quoteRelay } from '../payments/operations/relay/quote';
import { errorReply, unreachable } from './errors';
import { priceAboveLimitReply } from './limitRefusal';
import { maxAmountOf } from '../payments/accounts/policy';

/** POST /relay/sim and its deprecated alias POST /sim: the quote /relay would charge, by the same code. */
export async function simulateRelay(ctx: RequestContext<'postRelaySim'> | RequestContext<'postSim'>, deps: Deps) {
  const quote = await quoteRelay(deps, {
    call: ctx.body,
    budget: callBudget(deps.config.targetTimeoutMs),
    maxAmountMicroUsdc: maxAmountOf(ctx.body),
  });
  switch (quote.kind) {
    case 'free':
      return {
        status: 200 as const,
        body: {
          requiresPayment: false,
          message: `The target answered ${quote.response.status} without asking for payment; a relay would cost nothing`,
        },
      };
    case 'priced': {
      const { choice, fee } = quote;
      const settings = { percent: deps.config.relayFeePercent, minUsdc: deps.config.relayFeeMinUsdc };
      const upto = isUpto(choice);
      const scheme = upto ? ('upto' as const) : isChannel(choice) ? ('batch-settlement' as const) : ('exact' as const);
      return {
        status: 200 as const,
        body: {
          requiresPayment: true,
          targetPaymentRequirements: { ...choice.requirements, scheme },
          relayFeeBreakdown: {
            targetAmount: microToUsdc(fee.targetMicro),
            relayFee: microToUsdc(fee.feeMicro),
            totalAmount: microToUsdc(fee.totalMicro),
            relayFeePercentage: deps.config.relayFeePercent,
            relayFeeMinUSDC: Number(deps.config.relayFeeMinUsdc),
            feeModel: relayFeeModelText(settings),
          },
          pricing: pricingBody(relayPricing(scheme, fee)),
          message: upto
            ? `The target settles what the call uses, at most ${microToUsdc(fee.targetMicro)} USDC on ${choice.network}; a relay costs at most ${microToUsdc(fee.totalMicro)} USDC (${fee.totalMicro} micro-USDC): what the target settles plus the fee on it (paying by exact, the rest is refunded)`
            : `The target requires ${microToUsdc(fee.targetMicro)} USDC on ${choice.network}; a relay costs ${microToUsdc(fee.totalMicro)} USDC (${fee.totalMicro} micro-USDC)`,
          ...(quote.bazaar === undefined ? {} : { bazaar: quote.bazaar }),
        },
      };
    }
    case 'bad_request':
      return errorReply('validation_failed', quote.details);
    case 'price_above_limit':
      return priceAboveLimitReply(quote);
    case 'transfer_method_unsupported':
      return errorReply('transfer_method_unsupported', quote.details);
    case 'asset_unsupported':
    case 'pay_to_account_missing':
      return errorReply(quote.kind, quote.details);
    case 'bad_gateway':
      return errorReply('upstream_error', quote.details);
    case 'configuration_error':
      ctx.log.error({ details: quote.details }, 'relay simulation configuration error');
      return errorReply('configuration_error', quote.details);
    default:
      return unreachable(quote);
  }
}

export const postRelaySim: Handler<'postRelaySim'> = simulateRelay;
