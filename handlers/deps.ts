import type { ApiKeyCache } from '../payments/accounts';
import type { ServiceDeps } from '../payments/deps';

export interface CapMetric {
  active: number;
  limit: number;
  utilization: string;
}

/** A named readiness check: resolves when healthy, rejects with the reason otherwise. */
export type HealthCheck = () => Promise<void>;

/** Everything a handler may use, passed as one plain object (tests pass their own). */
export interface Deps extends ServiceDeps {
  capMetrics: () => Record<'proxy' | 'relay' | 'webhooks', CapMetric>;
  healthChecks: Record<string, HealthCheck>;
  document: Record<string, unknown>;
  docsHtml: string;
  /** The base URL clients reach this instance at (PUBLIC_BASE_URL, else http://HOST:PORT). */
  baseUrl: () => string;
  /** Valid API keys held in memory while key changes are being announced (absent: every call reads the database). */
  apiKeyCache?: ApiKeyCache;
}
