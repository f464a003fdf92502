import type { Deps } from '../payments/deps';

/**
 * What the jobs use: the service's one dependency object without the HTTP API's parts (in one
 * process the API and the worker share the very same members).
 */
export type WorkerDeps = Pick<
  Deps,
  | 'db'
  | 'config'
  | 'chains'
  | 'submissions'
  | 'clock'
  | 'log'
  | 'paymentBounds'
  | 'onUptoChargeLost'
  | 'resolver'
  | 'connections'
>;
