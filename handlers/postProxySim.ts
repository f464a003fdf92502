import type { Handler } from './types';
import type { CallRequest } from '../payments/outbound/index';
import { simulateProxyCall } from '../payments/proxy/simulate';
import { errorReply, unreachable } from './errors';

export const postProxySim: Handler<'postProxySim'> = async (ctx, deps) => {
  const outcome = await simulateProxyCall(deps, {
    call: ctx.body as CallRequest,
    timeoutMs: deps.config.targetTimeoutMs,
  });
  switch (outcome.kind) {
    case 'result':
      return { status: 200, body: outcome.result };
    case 'bad_request':
      return errorReply('validation_failed', outcome.details);
    case 'bad_gateway':
      return errorReply('upstream_error', outcome.details);
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy simulation configuration error');
      return errorReply('configuration_error', outcome.details);
    default:
      return unreachable(outcome);
  }
};
