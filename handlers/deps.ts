/**
 * What handlers receive: the service's one dependency object (payments/deps.ts), which the domain
 * and the jobs share, and the HTTP API's own parts, which only handlers use.
 */
import type { Deps } from '../payments/deps';

export type { Deps } from '../payments/deps';

export interface CapMetric {
  active: number;
  limit: number;
  utilization: string;
}

/** A named readiness check: resolves when healthy, rejects with the reason otherwise. */
export type HealthCheck = () => Promise<void>;

/** GET /health/live: the process answers and its event loop is not stalled. */
export interface LiveReport {
  status: 'ok' | 'stalled';
  /** The longest event-loop delay measured lately, in milliseconds. */
  eventLoopDelayMs: number;
  /** The bound over which the loop counts as stalled. */
  maxEventLoopDelayMs: number;
}

/** GET /health/ready: every check by name (`ok` or why it failed), and the names of those that failed. */
export interface ReadyReport {
  status: 'ready' | 'unavailable';
  checks: Record<string, string>;
  failed: string[];
}

export interface ProbeReports {
  live(): LiveReport;
  ready(): Promise<ReadyReport>;
}

/** The HTTP API's own parts, built by server/service.ts beside the domain's Deps. */
export interface ApiParts {
  capMetrics: () => Record<'proxy' | 'relay' | 'webhooks', CapMetric>;
  healthChecks: Record<string, HealthCheck>;
  /** Liveness and readiness of this process (server/probes.ts). */
  probes: ProbeReports;
  /** This instance's metrics in the Prometheus text exposition format (server/metrics.ts). */
  metricsExposition: () => Promise<{ contentType: string; body: string }>;
  document: Record<string, unknown>;
  docsHtml: string;
  /** The console page (GET /console) and the Content-Security-Policy it is served under. */
  consolePage: { html: string; contentSecurityPolicy: string };
  /** The base URL clients reach this instance at (PUBLIC_BASE_URL, else http://HOST:PORT). */
  baseUrl: () => string;
}

export type HandlerDeps = Deps & ApiParts;
