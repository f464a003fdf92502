/** load/scenarios.json for the Node runner: the requests the k6 scripts send, made concrete. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './children';
import type { LoadRequest } from './autocannon';

export type RequestName =
  'config' | 'health' | 'capMetrics' | 'proxyFree' | 'proxyPaid' | 'proxyHold' | 'relayHold' | 'webhook';
export type CapGroup = 'proxy' | 'relay' | 'webhooks';

interface RequestTemplate {
  method: 'GET' | 'POST';
  path: string;
  apiKey?: boolean;
  body?: unknown;
}

export interface Scenarios {
  requests: Record<RequestName, RequestTemplate>;
  caps: {
    groups: Record<CapGroup, { request: RequestName; defaultCap: number; heldBy: 'target' | 'client' }>;
    overloadFactor: number;
    benchOverloadFactor: number;
  };
  throughput: { runs: RequestName[]; connections: Record<string, number> };
  soak: { ratePerSecond: number; mix: Partial<Record<RequestName, number>> };
}

export const scenarios = JSON.parse(readFileSync(path.join(ROOT, 'load/scenarios.json'), 'utf8')) as Scenarios;

export interface Bindings {
  holdUrl?: string;
  freeUrl?: string;
  paidUrl?: string;
  webhookId?: string;
  apiKey?: string;
}

/** An id of the WebhookId format that no record has. */
export const UNKNOWN_WEBHOOK_ID = '6f1c1f4e-0000-4000-8000-00000000cafe';

function substitute(value: unknown, bindings: Bindings): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{(HOLD_URL|FREE_URL|PAID_URL|WEBHOOK_ID)\}/g, (_match, name: string) => {
      const bound = {
        HOLD_URL: bindings.holdUrl,
        FREE_URL: bindings.freeUrl,
        PAID_URL: bindings.paidUrl,
        WEBHOOK_ID: bindings.webhookId ?? UNKNOWN_WEBHOOK_ID,
      }[name];
      if (bound === undefined) throw new Error(`scenario needs ${name}`);
      return bound;
    });
  }
  if (Array.isArray(value)) return value.map((item) => substitute(item, bindings));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, substitute(item, bindings)]));
  return value;
}

export function requestOf(name: RequestName, bindings: Bindings): LoadRequest {
  const template = scenarios.requests[name];
  let headers: Record<string, string> | undefined;
  if (template.apiKey) {
    if (!bindings.apiKey) throw new Error(`${name} needs an API key`);
    headers = { 'x-api-key': bindings.apiKey };
  }
  return {
    method: template.method,
    path: substitute(template.path, bindings) as string,
    ...(headers ? { headers } : {}),
    ...(template.body === undefined ? {} : { body: JSON.stringify(substitute(template.body, bindings)) }),
  };
}
