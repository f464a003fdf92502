// Submissions from one wallet are serialised across processes, not only within one: two queues with
// their own connection pools (two service instances on one Postgres) never run work for the same
// network and key at once, while other keys run side by side. Without the advisory lock the two
// "instances" overlap at once (the last test shows it with the in-process-only lock).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, type DbHandle } from '../../db/index';
import { advisoryKeyLock, IN_PROCESS_ONLY, SubmissionQueue, type KeyLock } from '../../payments/chains/submissions';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';

let database: TestDatabase;
let instances: DbHandle[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  instances = [createDb(database.url, { maxConnections: 5 }), createDb(database.url, { maxConnections: 5 })];
});

afterAll(async () => {
  for (const instance of instances) await instance.close();
  await ifStarted(database)?.drop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `perQueue` submissions on each queue at once and reports the most that ran together per key. */
async function overlap(queues: SubmissionQueue[], keys: string[], perQueue: number) {
  const running = new Map<string, number>();
  const most = new Map<string, number>();
  let together = 0;
  let mostTogether = 0;
  const work = (key: string) => async () => {
    const now = (running.get(key) ?? 0) + 1;
    running.set(key, now);
    most.set(key, Math.max(most.get(key) ?? 0, now));
    together += 1;
    mostTogether = Math.max(mostTogether, together);
    // A nonce read, a signature and a broadcast take some milliseconds each.
    await sleep(5);
    running.set(key, (running.get(key) ?? 1) - 1);
    together -= 1;
    return key;
  };
  const results = await Promise.all(
    queues.flatMap((queue) =>
      Array.from({ length: perQueue }, (_, index) => {
        const key = keys[index % keys.length] ?? 'none';
        return queue.run(key, work(key));
      }),
    ),
  );
  return { most, mostTogether, results };
}

describe('the submission lock across processes', () => {
  it('never lets two instances submit for the same network and key at once', async () => {
    const queues = instances.map((instance) => new SubmissionQueue(advisoryKeyLock(instance.db)));
    const { most, results } = await overlap(queues, ['base-sepolia:0xabc'], 20);
    expect(results).toHaveLength(40);
    expect(most.get('base-sepolia:0xabc')).toBe(1);
  });

  it('lets different keys run side by side', async () => {
    const queues = instances.map((instance) => new SubmissionQueue(advisoryKeyLock(instance.db)));
    const { most, mostTogether } = await overlap(queues, ['base:0xabc', 'base-sepolia:0xabc'], 20);
    expect(most.get('base:0xabc')).toBe(1);
    expect(most.get('base-sepolia:0xabc')).toBe(1);
    expect(mostTogether).toBe(2);
  });

  it('releases the lock when the work fails, so the next submission runs', async () => {
    const [first, second] = instances.map((instance) => new SubmissionQueue(advisoryKeyLock(instance.db)));
    await expect(
      first!.run('base:0xdef', () => Promise.reject(new Error('the node refused the transaction'))),
    ).rejects.toThrow('refused');
    await expect(second!.run('base:0xdef', () => Promise.resolve('sent'))).resolves.toBe('sent');
  });

  it('overlaps without it: two instances with only their own queues collide', async () => {
    const locks: KeyLock[] = [IN_PROCESS_ONLY, IN_PROCESS_ONLY];
    const queues = locks.map((lock) => new SubmissionQueue(lock));
    const { most } = await overlap(queues, ['base-sepolia:0xabc'], 20);
    expect(most.get('base-sepolia:0xabc')).toBe(2);
  });
});
