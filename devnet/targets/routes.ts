// The routes every target serves, and what each one answers once any payment has been verified.
// Handlers return a reply instead of writing it, so that the payment layer in front of them
// (x402-express or ours) decides whether it is sent as is, settled first, or replaced.
import type { Request } from 'express';
import { setTimeout as delay } from 'node:timers/promises';

export const ROUTE_NAMES = ['free', 'paid', 'echo', 'paidEcho', 'neverSettles', 'error', 'slow', 'hold'] as const;
export type RouteName = (typeof ROUTE_NAMES)[number];

export const ROUTE_PATHS: Record<RouteName, string> = {
  free: '/free',
  paid: '/paid',
  echo: '/echo',
  paidEcho: '/paid/echo',
  neverSettles: '/never-settles',
  error: '/error',
  slow: '/slow',
  hold: '/hold',
};

/** Prices in micro-USDC; null is a free route. */
export const DEFAULT_PRICES_MICRO_USDC: Record<RouteName, bigint | null> = {
  free: null,
  paid: 10_000n,
  echo: null,
  paidEcho: 10_000n,
  neverSettles: 10_000n,
  error: 10_000n,
  slow: 10_000n,
  hold: null,
};

export const DEFAULT_SLOW_DELAY_MS = 2_000;
export const MAX_SLOW_DELAY_MS = 300_000;
export const DEFAULT_HOLD_TIMEOUT_MS = 60_000;

export interface Reply {
  status: number;
  body: unknown;
}

/** What /echo and /paid/echo answer: the request as the target received it. */
export interface EchoedRequest {
  method: string;
  path: string;
  query: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  contentType: string | null;
}

export interface RouteContext {
  targetName: string;
  network: string;
  slowDelayMs: number;
  errorStatus: number;
  hold: HoldGate;
  /** Aborted when the target stops, so that nothing it started keeps the process alive. */
  signal: AbortSignal;
}

export function requestBodyText(request: Request): string {
  return Buffer.isBuffer(request.body) ? request.body.toString('utf8') : '';
}

export function echoOf(request: Request): EchoedRequest {
  return {
    method: request.method,
    path: request.path,
    query: request.query,
    headers: request.headers,
    body: requestBodyText(request),
    contentType: request.headers['content-type'] ?? null,
  };
}

function boundedNumber(raw: unknown, fallback: number, min: number, max: number): number {
  const parsed = typeof raw === 'string' && /^\d+$/.test(raw) ? Number(raw) : fallback;
  return Math.min(Math.max(parsed, min), max);
}

export async function replyFor(route: RouteName, request: Request, context: RouteContext): Promise<Reply> {
  const served = { ok: true, route, target: context.targetName, network: context.network };
  switch (route) {
    case 'free':
    case 'paid':
      return { status: 200, body: served };
    case 'echo':
    case 'paidEcho':
      return { status: 200, body: echoOf(request) };
    case 'neverSettles':
      // When paid, the target answers a 402 with the route's requirements instead (target.ts).
      return { status: 402, body: { x402Version: 1, error: 'payment_not_accepted', accepts: [] } };
    case 'error': {
      const status = boundedNumber(request.query.status, context.errorStatus, 500, 599);
      return { status, body: { ok: false, route, error: 'target failure' } };
    }
    case 'slow': {
      const delayMs = boundedNumber(request.query.delayMs, context.slowDelayMs, 0, MAX_SLOW_DELAY_MS);
      try {
        await delay(delayMs, undefined, { signal: context.signal });
      } catch {
        return { status: 503, body: { ok: false, route, error: 'target stopping' } };
      }
      return { status: 200, body: { ...served, delayMs } };
    }
    case 'hold': {
      const released = await context.hold.wait();
      return released
        ? { status: 200, body: served }
        : { status: 503, body: { ok: false, route, error: 'hold timed out or target stopping' } };
    }
  }
}

/**
 * Keeps /hold requests open until a test releases them, counting how many wait at once. Each
 * wait is bounded by holdTimeoutMs.
 */
export class HoldGate {
  arrivals = 0;
  maxWaiting = 0;
  private readonly waiters: Array<(released: boolean) => void> = [];
  private readonly arrivalListeners = new Set<() => void>();

  constructor(private readonly holdTimeoutMs: number) {}

  get waiting(): number {
    return this.waiters.length;
  }

  wait(): Promise<boolean> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined = undefined;
      const settle = (released: boolean) => {
        clearTimeout(timer);
        const index = this.waiters.indexOf(settle);
        if (index >= 0) this.waiters.splice(index, 1);
        resolve(released);
      };
      timer = setTimeout(() => settle(false), this.holdTimeoutMs);
      this.waiters.push(settle);
      this.arrivals += 1;
      this.maxWaiting = Math.max(this.maxWaiting, this.waiters.length);
      for (const listener of this.arrivalListeners) listener();
    });
  }

  /** Lets the oldest `count` waiting requests (all by default) answer 200; returns how many. */
  release(count = this.waiters.length): number {
    const releasing = this.waiters.slice(0, count);
    for (const settle of releasing) settle(true);
    return releasing.length;
  }

  /** Resolves once `count` requests are waiting at the same time; rejects after timeoutMs. */
  waitForWaiting(count: number, timeoutMs = 10_000): Promise<void> {
    if (this.waiting >= count) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const listener = () => {
        if (this.waiting < count) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`only ${this.waiting} of ${count} requests were waiting at /hold after ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.arrivalListeners.delete(listener);
      };
      this.arrivalListeners.add(listener);
    });
  }

  /** Answers every waiting request with 503 (used when the target stops). */
  abandonAll(): void {
    for (const settle of this.waiters.slice()) settle(false);
  }

  resetCounters(): void {
    this.arrivals = 0;
    this.maxWaiting = this.waiters.length;
  }
}
