/**
 * For afterAll: what beforeAll set, or undefined when beforeAll failed before setting it. The
 * variables are declared as set, for the tests; their teardown must not assume it.
 */
export function ifStarted<T>(value: T): T | undefined {
  return value;
}
