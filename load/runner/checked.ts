/** Checked access for the runner: an item the code relies on being there, or a clear error naming it. */

/** value; throws when it is undefined (named by `what`). */
export function defined<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`${what} is missing`);
  return value;
}

/** items[index]; throws when there is no item there (a bug in the caller, named by `what`). */
export function itemAt<T>(items: ArrayLike<T>, index: number, what: string): T {
  const item = items[index];
  if (item === undefined) throw new Error(`${what}: no item at index ${index} (of ${items.length})`);
  return item;
}

/** map.get(key); throws when the key is missing (a bug in the caller, named by `what`). */
export function entryOf<K, V>(map: ReadonlyMap<K, V>, key: K, what: string): V {
  const value = map.get(key);
  if (value === undefined) throw new Error(`${what}: nothing under ${String(key)}`);
  return value;
}
