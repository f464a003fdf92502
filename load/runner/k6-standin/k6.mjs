import { record } from './state.mjs';

export function check(value, sets, tags = {}) {
  let all = true;
  for (const [name, predicate] of Object.entries(sets)) {
    let passed;
    try {
      passed = Boolean(predicate(value));
    } catch {
      passed = false;
    }
    record('checks', passed ? 1 : 0, { check: name, ...tags });
    all = all && passed;
  }
  return all;
}

export function sleep(seconds) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.max(0, seconds * 1000));
}

export function fail(message) {
  throw new Error(message);
}
