import type { Handler } from './types';
import type { CallRequest } from '../payments/outbound/index';
import { simulateProxyCall } from '../payments/proxy/simulate';

export const postProxySim: Handler<'postProxySim'> = async (ctx, deps) => {
  const outcome = await simulateProxyCall(deps, { call: ctx.body as CallRequest, timeoutMs: deps.config.targetTimeoutMs });
  switch (outcome.kind) {
    case 'result':
      return { status: 200, body: outcome.result };
    case 'bad_request':
      return { status: 400, body: { error: 'Bad Request', details: outcome.details } };
    case 'bad_gateway':
      return { status: 502, body: { error: 'Bad Gateway', details: outcome.details } };
    case 'configuration_error':
      ctx.log.error({ details: outcome.details }, 'proxy simulation configuration error');
      return { status: 500, body: { error: 'Internal Server Error', details: outcome.details } };
  }
};
