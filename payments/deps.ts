import type { Logger } from 'pino';
import type { Db } from '../db/index';
import type { Clock } from './clock';
import type { Config } from './config';
import type { Chains } from './networks/index';
import type { Resolver } from './outbound/index';
import type { SubmissionQueue } from './relay/queue';

/** What the money domain's entry points use, passed as one plain object by the API and the worker. */
export interface ServiceDeps {
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
}
