/**
 * Submissions from one sending key must not race: two transactions prepared at once read the same
 * account nonce and one of them replaces or rejects the other. Within a process each key gets a
 * promise chain; work for other keys runs freely. The chain is bounded: past MAX_QUEUED_PER_KEY
 * waiting submissions, a new one is refused instead of waiting without end.
 *
 * Several API instances and workers share one wallet (docs/architecture.md, several instances), so
 * each submission also holds a lock that spans processes: a Postgres advisory lock per network and
 * sending key, taken inside a transaction (released by commit, or by the server when the process
 * dies), around nonce choice, signing and broadcast.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/index';

export const MAX_QUEUED_PER_KEY = 256;

/** Runs work while holding the lock named `key` against every other holder of that name. */
export interface KeyLock {
  withLock<T>(key: string, work: () => Promise<T>): Promise<T>;
}

/** No lock beyond this process: for a single process that owns its wallet (tests, tools). */
export const IN_PROCESS_ONLY: KeyLock = { withLock: (_key, work) => work() };

/** Names of our advisory locks are namespaced so they cannot meet another use of the same number. */
const LOCK_NAMESPACE = 'submission:';

/** A Postgres advisory lock per key, shared by every process on the database. */
export function advisoryKeyLock(db: Db): KeyLock {
  return {
    withLock: async (key, work) => {
      let finished: { value: Awaited<ReturnType<typeof work>> } | undefined;
      try {
        return await db.transaction().execute(async (trx) => {
          await sql`select pg_advisory_xact_lock(hashtextextended(${LOCK_NAMESPACE + key}, 0))`.execute(trx);
          finished = { value: await work() };
          return finished.value;
        });
      } catch (error) {
        // The work ran under the lock and only the commit failed (the connection was lost, as in a
        // database restart, which released the lock with it): the transaction holds nothing else,
        // and the work's outcome (a broadcast transaction) must reach its caller.
        if (finished) return finished.value;
        throw error;
      }
    },
  };
}

export class SubmissionQueueFull extends Error {
  constructor(readonly key: string) {
    super(`more than ${MAX_QUEUED_PER_KEY} submissions are waiting for ${key}`);
  }
}

export class SubmissionQueue {
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly waiting = new Map<string, number>();

  constructor(
    private readonly lock: KeyLock,
    private readonly maxQueuedPerKey = MAX_QUEUED_PER_KEY,
  ) {}

  /**
   * Runs `work` after every earlier submission of `key` in this process has finished (successfully
   * or not), holding `key`'s lock against other processes.
   */
  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const count = this.waiting.get(key) ?? 0;
    if (count >= this.maxQueuedPerKey) return Promise.reject(new SubmissionQueueFull(key));
    this.waiting.set(key, count + 1);
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous
      .then(() => this.lock.withLock(key, work))
      .finally(() => {
        const left = (this.waiting.get(key) ?? 1) - 1;
        if (left === 0) this.waiting.delete(key);
        else this.waiting.set(key, left);
      });
    const tail = result.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }
}
