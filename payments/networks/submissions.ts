/**
 * Submissions from one sending key must not race: two transactions prepared at once read the same
 * account nonce and one of them fails (RECIPES: "Parallel transactions from one key collide").
 * Each key gets a promise chain; work for other keys runs freely. The chain is bounded: past
 * MAX_QUEUED_PER_KEY waiting submissions, a new one is refused instead of waiting without end.
 */
export const MAX_QUEUED_PER_KEY = 256;

export class SubmissionQueueFull extends Error {
  constructor(readonly key: string) {
    super(`more than ${MAX_QUEUED_PER_KEY} submissions are waiting for ${key}`);
  }
}

export class SubmissionQueue {
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly waiting = new Map<string, number>();

  constructor(private readonly maxQueuedPerKey = MAX_QUEUED_PER_KEY) {}

  /** Runs `work` after every earlier submission of `key` has finished (successfully or not). */
  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const count = this.waiting.get(key) ?? 0;
    if (count >= this.maxQueuedPerKey) return Promise.reject(new SubmissionQueueFull(key));
    this.waiting.set(key, count + 1);
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(work).finally(() => {
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
