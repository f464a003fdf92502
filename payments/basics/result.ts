/**
 * The outcome of a step that can be refused: a value, or a snake_case reason that callers act on
 * with details safe to show. Its own module, importing nothing, so that every folder of payments/
 * (the network table, x402, the chains, configuration) can use it without importing each other.
 * An outcome with more than two answers is a union on `kind` instead (docs/architecture.md 1.2).
 */
export type Ok<T> = { ok: true; value: T };
export type Failure<Reason extends string> = { ok: false; reason: Reason; details: string };
export type Result<T, Reason extends string> = Ok<T> | Failure<Reason>;

export function ok<T>(value: T): Ok<T> {
  return { ok: true, value };
}

export function fail<Reason extends string>(reason: Reason, details: string): Failure<Reason> {
  return { ok: false, reason, details };
}
