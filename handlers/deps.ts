/** Handlers receive the service's one dependency object (payments/deps.ts). */
export type { CapMetric, Deps, HealthCheck, LiveReport, ReadyReport } from '../payments/deps';
