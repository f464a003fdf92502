import type { Logger } from 'pino';
import type { Db } from '../db/index';
import type { ApiKeyCache } from './accounts/accounts';
import type { Clock } from './basics/clock';
import type { Config } from './basics/config';
import type { Chains } from './chains/index';
import type { Resolver, TargetConnections } from './basics/http/index';
import type { SubmissionQueue } from './chains/submissions';
import type { PaymentBounds } from './basics/paymentBounds';
import type { WalletBalances } from './chains/balances';
import type { ClaimOwner } from './basics/idempotency';

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
  /** Bounds of the waits of the relay's settlements and refunds (DEFAULT_PAYMENT_BOUNDS). */
  paymentBounds: PaymentBounds;
  /** Valid API keys held in memory while key changes are being announced (else every call reads the database). */
  apiKeyCache: ApiKeyCache;
  /** This process as the owner of the paid calls it claims (payments/basics/idempotency.ts): its id and lease. */
  idempotencyOwner: ClaimOwner;
  /**
   * Told of each charge of an upto permit lost after the target was paid (the payer revoked its
   * allowance or moved its funds): the service's metrics.
   */
  onUptoChargeLost: (network: string) => void;
  /**
   * Told of each upto permit refused before anything moved because its payer once failed to pay
   * one, or a bound on our exposure to unsettled upto permits was reached: the service's metrics.
   */
  onUptoRefused: (reason: 'payer_defaulted' | 'wallet_exposure' | 'total_exposure') => void;
  /** Told of each call the facilitator refused with 401 or 403 (our credentials): the service's metrics. */
  onFacilitatorRefusedCredentials: (path: '/settle', status: number) => void;
}
