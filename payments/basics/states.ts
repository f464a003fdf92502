/**
 * What the tables of allowed moves have in common (payments/incoming/states.ts,
 * payments/incoming/refundStates.ts, payments/operations/proxy/states.ts, payments/tracking/webhookStates.ts,
 * payments/tracking/finalityStates.ts). A table lists, for each state, the states a row may move to; a
 * write function reads the states it may leave from the table and names them in the WHERE of its
 * guarded update, so a rule is changed in one place and a move the table does not hold cannot be
 * written. test/db/state-tables.test.ts holds each table to the diagram in its file's header.
 */

/** For each state, the states a row in it may move to. */
export type MoveTable<S extends string> = { readonly [K in S]: readonly S[] };

/** The states of `M` from which `To` may be reached: what a caller may narrow a move to. */
export type FromOf<M extends MoveTable<string>, To extends string> = {
  [K in keyof M]: To extends M[K][number] ? K : never;
}[keyof M] &
  string;

/** Every state that may move to `to`, in the table's order. */
export function fromStates<S extends string>(moves: MoveTable<S>, to: S): S[] {
  return (Object.keys(moves) as S[]).filter((from) => moves[from].includes(to));
}

/**
 * The states a guarded update to `to` may leave: the table's, or the caller's narrower choice. A
 * move the table does not hold is a mistake in the program, never a row that moved on: it throws
 * instead of quietly updating nothing.
 */
export function allowedFrom<S extends string>(record: string, moves: MoveTable<S>, to: S, from?: readonly S[]): S[] {
  const allowed = fromStates(moves, to);
  if (allowed.length === 0) throw new Error(`${record}: nothing may move to ${to}`);
  if (from === undefined) return allowed;
  const refused = from.filter((state) => !allowed.includes(state));
  if (refused.length > 0 || from.length === 0) {
    throw new Error(
      `${record}: ${refused.length > 0 ? refused.join(', ') : '(no state)'} -> ${to} is not an allowed move`,
    );
  }
  return [...from];
}
