import { describe, expect, it } from 'vitest';
import type { Request, Response } from 'express';
import { ConcurrencyCaps, capsMiddleware, type CapGroup } from '../../server/caps';

/**
 * The group the caps middleware counts a path in: with every group full, a path of a group is
 * refused (and the group named), and any other path goes on.
 */
function capGroupOf(path: string): CapGroup | undefined {
  const caps = new ConcurrencyCaps({ relay: 1, proxy: 1, webhooks: 1 });
  for (const group of ['relay', 'proxy', 'webhooks'] as const) caps.tryAcquire(group);
  let refused: CapGroup | undefined;
  let passed = false;
  const res = {
    locals: {},
    setHeader: () => res,
    status: () => res,
    json: () => res,
  } as unknown as Response;
  capsMiddleware(caps, (group) => (refused = group))(
    { path, headers: {} } as unknown as Request,
    res,
    () => (passed = true),
  );
  expect(passed).toBe(refused === undefined);
  return refused;
}

describe('concurrency caps', () => {
  it('maps the routes of the interface to their groups', () => {
    expect(capGroupOf('/relay')).toBe('relay');
    expect(capGroupOf('/relay/sim')).toBe('relay');
    expect(capGroupOf('/relay/limits/0xabc')).toBe('relay');
    expect(capGroupOf('/sim')).toBe('relay');
    expect(capGroupOf('/proxy')).toBe('proxy');
    expect(capGroupOf('/proxy/sim')).toBe('proxy');
    expect(capGroupOf('/webhooks/123')).toBe('webhooks');
    expect(capGroupOf('/relayer')).toBeUndefined();
    expect(capGroupOf('/config')).toBeUndefined();
    expect(capGroupOf('/metrics/rate-limits')).toBeUndefined();
  });

  it('never admits more than the limit, whatever the order of acquire and release', () => {
    const caps = new ConcurrencyCaps({ relay: 7, proxy: 3, webhooks: 1 });
    const held: Array<() => void> = [];
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    let maxSeen = 0;
    let refused = 0;
    for (let step = 0; step < 10_000; step++) {
      if (random() < 0.6) {
        const release = caps.tryAcquire('relay');
        if (release) held.push(release);
        else refused++;
      } else if (held.length > 0) {
        const release = held.splice(Math.floor(random() * held.length), 1)[0]!;
        release();
        release(); // a second release of the same slot changes nothing
      }
      maxSeen = Math.max(maxSeen, caps.metric('relay').active);
      expect(caps.metric('relay').active).toBe(held.length);
    }
    expect(maxSeen).toBe(7);
    expect(refused).toBeGreaterThan(0);
  });

  it('reports utilization with one decimal', () => {
    const caps = new ConcurrencyCaps({ relay: 8, proxy: 3, webhooks: 200 });
    caps.tryAcquire('relay');
    caps.tryAcquire('proxy');
    expect(caps.metric('relay')).toEqual({ active: 1, limit: 8, utilization: '12.5%' });
    expect(caps.metric('proxy').utilization).toBe('33.3%');
    expect(caps.metric('webhooks').utilization).toBe('0.0%');
  });
});
