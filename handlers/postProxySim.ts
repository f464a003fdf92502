import type { Handler } from './types';
import type { CallRequest } from '../payments/basics/http/index';
import { simulateProxyCall } from '../payments/operations/proxy/simulate';
import { microToUsdc } from '../payments/basics/money';
import { pricingBody } from './pricing';
import { errorReply, requireApiKey, unreachable } from './errors';
import { callLimits, limitRefusalReply } from './limitRefusal';

export const postProxySim: Handler<'postProxySim'> = async (ctx, deps) => {
  const outcome = await simulateProxyCall(deps, {
    call: ctx.body as CallRequest,
    timeoutMs: deps.config.targetTimeoutMs,
    limits: callLimits(ctx.body, requireApiKey(ctx)),
  });
  switch (outcome.kind) {
    case 'result': {
      const { result } = outcome;
      if (!result.requiresPayment) return { status: 200, body: result };
      const { feeBreakdown: fee, pricing } = result;
      return {
        status: 200,
        body: {
          ...result,
          feeBreakdown: {
            targetAmount: microToUsdc(fee.targetMicroUsdc),
            proxyFee: microToUsdc(fee.feeMicroUsdc),
            totalAmount: microToUsdc(fee.totalMicroUsdc),
            totalCredits: Number(fee.totalCredits),
          },
          pricing: pricingBody(pricing),
        },
      };
    }
    case 'bad_request':
      return errorReply('validation_failed', outcome.details);
    case 'policy_refused':
    case 'price_above_limit':
      return limitRefusalReply(outcome);
    case 'transfer_method_unsupported':
      return errorReply('transfer_method_unsupported', outcome.details);
    case 'asset_unsupported':
    case 'pay_to_account_missing':
      return errorReply(outcome.kind, outcome.details);
    case 'bad_gateway':
      return errorReply('upstream_error', outcome.details);
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy simulation configuration error');
      return errorReply('configuration_error', outcome.details);
    default:
      return unreachable(outcome);
  }
};
