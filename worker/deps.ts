import type { ServiceDeps } from '../payments/deps';

/** What a task may use, passed as one plain object (the same as the API's, shared in one process). */
export type WorkerDeps = ServiceDeps;
