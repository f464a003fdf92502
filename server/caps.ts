/**
 * Concurrency caps per instance on the route groups of the interface (/relay*, /proxy*,
 * /webhooks/*). Admission is a synchronous check-and-increment in the event loop, so the active
 * count can never pass the limit. The slot is freed once: when the response is finished, or when
 * the connection is gone and no work of the request is still running (a paid call goes on after
 * its client left, and keeps its slot until it ends, so the work in flight never passes the cap).
 */
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';
import { errorReply } from '../handlers/errors';

export type CapGroup = 'relay' | 'proxy' | 'webhooks';

export interface CapMetric {
  active: number;
  limit: number;
  utilization: string;
}

export const RETRY_AFTER_SECONDS = 1;

export class ConcurrencyCaps {
  private readonly active: Record<CapGroup, number> = { relay: 0, proxy: 0, webhooks: 0 };

  constructor(private readonly limits: Record<CapGroup, number>) {}

  tryAcquire(group: CapGroup): (() => void) | undefined {
    if (this.active[group] >= this.limits[group]) return undefined;
    this.active[group] += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active[group] -= 1;
    };
  }

  metric(group: CapGroup): CapMetric {
    const active = this.active[group];
    const limit = this.limits[group];
    // One decimal, computed in integers: tenths of a percent, rounded half up.
    const tenths = Math.floor((active * 1000 + Math.floor(limit / 2)) / limit);
    return { active, limit, utilization: `${Math.floor(tenths / 10)}.${tenths % 10}%` };
  }

  metrics(): Record<CapGroup, CapMetric> {
    return { proxy: this.metric('proxy'), relay: this.metric('relay'), webhooks: this.metric('webhooks') };
  }
}

function capGroupOf(path: string): CapGroup | undefined {
  if (path === '/relay' || path.startsWith('/relay/') || path === '/sim') return 'relay';
  if (path === '/proxy' || path.startsWith('/proxy/')) return 'proxy';
  if (path.startsWith('/webhooks/')) return 'webhooks';
  return undefined;
}

/** Refusals are logged at most once a second per group, with how many there were: an overload must not also flood the logs. */
const REFUSAL_LOG_INTERVAL_MS = 1_000;

/** `onRefused` is told of every 429 a cap answers (the service's metrics). */
export function capsMiddleware(caps: ConcurrencyCaps, onRefused?: (group: CapGroup) => void) {
  const refusals: Record<CapGroup, { count: number; loggedAt: number }> = {
    relay: { count: 0, loggedAt: 0 },
    proxy: { count: 0, loggedAt: 0 },
    webhooks: { count: 0, loggedAt: 0 },
  };
  return (req: Request, res: Response, next: NextFunction): void => {
    const group = capGroupOf(req.path);
    if (!group) {
      next();
      return;
    }
    const release = caps.tryAcquire(group);
    if (!release) {
      onRefused?.(group);
      const { active, limit } = caps.metric(group);
      const refused = refusals[group];
      refused.count += 1;
      const now = Date.now();
      if (now - refused.loggedAt >= REFUSAL_LOG_INTERVAL_MS) {
        // The request's logger, when requestLogging ran before this middleware.
        (res.locals.log as Logger | undefined)?.warn(
          { capGroup: group, active, limit, refusedSinceLastLine: refused.count },
          'concurrency cap reached',
        );
        refused.count = 0;
        refused.loggedAt = now;
      }
      res.setHeader('Retry-After', String(RETRY_AFTER_SECONDS));
      // The request body is not read: close the connection after answering rather than drain it.
      if (req.headers['content-length'] && req.headers['content-length'] !== '0') res.setHeader('Connection', 'close');
      const reply = errorReply('capacity_exceeded', `${active}/${limit}`, {
        message: `The service is at its concurrent request capacity for /${group}; retry after ${RETRY_AFTER_SECONDS} second.`,
        retryAfter: RETRY_AFTER_SECONDS,
      });
      res.status(reply.status).json(reply.body);
      return;
    }
    const slot: Slot = { release, holds: 0, closed: false };
    res.locals.capSlot = slot;
    res.once('finish', release);
    res.once('close', () => {
      slot.closed = true;
      if (slot.holds === 0) release();
    });
    next();
  };
}

interface Slot {
  release: () => void;
  holds: number;
  closed: boolean;
}

/**
 * Keeps the request's slot taken while its work runs, even if the client goes away meanwhile;
 * the returned function ends the hold (and frees the slot if the connection is already gone).
 */
export function holdSlot(res: Response): () => void {
  const slot = res.locals.capSlot as Slot | undefined;
  if (!slot) return () => {};
  slot.holds += 1;
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    slot.holds -= 1;
    if (slot.holds === 0 && slot.closed) slot.release();
  };
}
