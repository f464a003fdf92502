import { describe, expect, it } from 'vitest';
import { callTimeoutMs } from '../../handlers/postProxy';
import {
  EXPIRED_RECHECK_MS,
  MAX_RECHECK_MS,
  MIN_RECHECK_MS,
  nextLookAt,
  proxyPaymentWatch,
  UNTIMED_RECHECK_MS,
} from '../../worker/tasks/proxyPaymentWatch';
import type { WorkerDeps } from '../../worker/deps';

describe('the bound on a /proxy call', () => {
  it('is the smaller of the body timeout (s) and X-TIMEOUT (ms), else TARGET_TIMEOUT_MS', () => {
    expect(callTimeoutMs(undefined, undefined, 120_000)).toBe(120_000);
    expect(callTimeoutMs(2.5, undefined, 120_000)).toBe(2_500);
    expect(callTimeoutMs(undefined, '800', 120_000)).toBe(800);
    expect(callTimeoutMs(30, '800', 120_000)).toBe(800);
    expect(callTimeoutMs(0.2, '800', 120_000)).toBe(200);
    // A client may ask for more than the server default, up to the documented 120 s.
    expect(callTimeoutMs(100, undefined, 30_000)).toBe(100_000);
    expect(callTimeoutMs(undefined, ['500', '900'], 30_000)).toBe(500);
  });
});

describe('the watch job', () => {
  const now = new Date('2026-11-21T12:00:00Z');
  const inMs = (ms: number) => new Date(now.getTime() + ms);

  it('looks again after a quarter of the time left, within its bounds; every 2 s once expired', () => {
    expect(nextLookAt(now, inMs(8_000))).toEqual(inMs(2_000));
    expect(nextLookAt(now, inMs(2_000))).toEqual(inMs(MIN_RECHECK_MS));
    expect(nextLookAt(now, inMs(600_000))).toEqual(inMs(MAX_RECHECK_MS));
    expect(nextLookAt(now, inMs(-1))).toEqual(inMs(EXPIRED_RECHECK_MS));
    expect(nextLookAt(now, undefined)).toEqual(inMs(UNTIMED_RECHECK_MS));
  });

  it('takes only an id as a decimal string', async () => {
    // The job as the worker runs it, up to its first step: the id it logs under, then the database
    // (refused here, so nothing is read).
    const logged: unknown[] = [];
    const deps = {
      log: {
        child: (bindings: unknown) => {
          logged.push(bindings);
          throw new Error('no further in a unit test');
        },
      },
    } as unknown as WorkerDeps;
    const run = (payload: unknown) => proxyPaymentWatch(deps)(payload as never, undefined as never);
    await expect(run({ proxyPaymentId: '42' })).rejects.toThrow(/no further/);
    expect(logged).toEqual([{ task: 'proxy_payment_watch', proxyPaymentId: '42' }]);
    for (const payload of [
      null,
      {},
      { proxyPaymentId: 42 },
      { proxyPaymentId: '0' },
      { proxyPaymentId: '4x' },
      { proxyPaymentId: '1'.repeat(20) },
    ]) {
      await expect(run(payload)).rejects.toThrow(/proxyPaymentId/);
    }
    expect(logged).toHaveLength(1);
  });
});
