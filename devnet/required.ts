// A value the harness's own bookkeeping guarantees (a chain for every started network, an RPC URL
// for every cluster, and the like): read through this, a broken guarantee is an error that says
// what is missing, not a TypeError further on.
export function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`${what} is missing`);
  return value;
}
