/**
 * The row of a statement that always answers one (a function call, an insert returning): its
 * absence is a bug, never a result, and is thrown as one.
 */
export function firstRow<T>(rows: readonly T[], statement: string): T {
  const [row] = rows;
  if (row === undefined) throw new Error(`${statement} answered no row`);
  return row;
}
