import type { Logger } from 'pino';
import type { Db } from '../db/index';
import type { ApiKeyCache } from './accounts';
import type { Clock } from './clock';
import type { Config } from './config';
import type { Chains } from './chains/index';
import type { Resolver, TargetConnections } from './outbound/index';
import type { SubmissionQueue } from './chains/submissions';
import type { RelayLimits } from './relayLimits';
import type { WalletBalances } from './chains/balances';
import type { ClaimOwner } from './idempotency';

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

/**
 * Points on the money path where the caller of startService may act between two steps. The
 * service's own are no-ops; a test passes its own to stop a request exactly there (for example to
 * kill the process between settling the client's payment and paying the target).
 */
export interface Hooks {
  /** The client's payment of a relay has settled; the target is not paid yet. */
  afterClientSettled(relayTxId: bigint): Promise<void>;
}

export const NO_HOOKS: Hooks = {
  afterClientSettled: async () => {},
};

/**
 * Everything the service shares, built once per process by server/service.ts and passed as one
 * plain object to handlers, domain functions and jobs. Each function takes `Pick<Deps, ...>` of
 * exactly what it uses, so a test builds only those members. Settings are read from `config`;
 * nothing here is optional, so a part cannot be silently left out.
 */
export interface Deps {
  db: Db;
  config: Config;
  /** The enabled networks, their clients and our wallet on each. */
  chains: Chains;
  /** One per process: every transaction our wallet sends goes through it, one at a time per key. */
  submissions: SubmissionQueue;
  /** Name resolution of target hosts for the SSRF guard (tests pass a resolver of their own). */
  resolver: Resolver;
  clock: Clock;
  log: Logger;
  /** Kept-alive connections to targets, closed when the service stops. */
  connections: TargetConnections;
  /** Our wallet's USDC balance as last read, less what was signed since: spares a read per payment. */
  balances: WalletBalances;
  /** Bounds of the waits of the relay's settlements and refunds (DEFAULT_RELAY_LIMITS). */
  relayLimits: RelayLimits;
  /** Valid API keys held in memory while key changes are being announced (else every call reads the database). */
  apiKeyCache: ApiKeyCache;
  hooks: Hooks;
  /** This process as the owner of the paid calls it claims (payments/idempotency.ts): its id and lease. */
  idempotencyOwner: ClaimOwner;

  // The HTTP API's own parts: typed here so that handlers and the worker share one shape.
  capMetrics: () => Record<'proxy' | 'relay' | 'webhooks', CapMetric>;
  healthChecks: Record<string, HealthCheck>;
  /** Liveness and readiness of this process (server/probes.ts). */
  probes: ProbeReports;
  /** This instance's metrics in the Prometheus text exposition format (server/metrics.ts). */
  metricsExposition: () => Promise<{ contentType: string; body: string }>;
  document: Record<string, unknown>;
  docsHtml: string;
  /** The base URL clients reach this instance at (PUBLIC_BASE_URL, else http://HOST:PORT). */
  baseUrl: () => string;
}
