import type { RunResult } from './autocannon';

/**
 * The documented 429 of the concurrency caps (openapi/components/errors/TooManyRequests.yaml and
 * server/caps.ts), checked the same way by the k6 scripts (load/lib/k6.js): a Retry-After header
 * of whole seconds (at least 1), and exactly {code: "capacity_exceeded", error: "Too Many Requests",
 * message, details "active/limit", retryAfter} with retryAfter equal to the header. Used where a full contract
 * check per response would cost the load generator too much; the test validates every response
 * against the document instead.
 */
export function problemsOf429(body: string, headers: Record<string, unknown>, limit?: number): string[] {
  const problems: string[] = [];
  const retryAfter = headers['retry-after'];
  if (typeof retryAfter !== 'string' || !/^[1-9][0-9]*$/.test(retryAfter))
    problems.push(`Retry-After is ${JSON.stringify(retryAfter)}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return [...problems, 'body is not JSON'];
  }
  // The body's fields; none when it is not an object.
  const fields = typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {};
  const keys = Object.keys(parsed ?? {})
    .sort()
    .join(',');
  if (keys !== 'code,details,error,message,retryAfter') problems.push(`body fields are ${keys}`);
  if (fields.code !== 'capacity_exceeded') problems.push(`code is ${JSON.stringify(fields.code)}`);
  if (fields.error !== 'Too Many Requests') problems.push(`error is ${JSON.stringify(fields.error)}`);
  if (typeof fields.message !== 'string') problems.push('message is not a string');
  const details = /^([0-9]+)\/([0-9]+)$/.exec(String(fields.details));
  if (!details) problems.push(`details is ${JSON.stringify(fields.details)}`);
  else if (Number(details[1]) > Number(details[2]))
    problems.push(`details ${String(fields.details)}: more active than the limit`);
  else if (limit !== undefined && Number(details[2]) !== limit)
    problems.push(`details ${String(fields.details)}: the limit is ${limit}`);
  const retryAfterField = fields.retryAfter;
  if (
    typeof retryAfterField !== 'number' ||
    !Number.isInteger(retryAfterField) ||
    retryAfterField < 1 ||
    String(retryAfterField) !== retryAfter
  ) {
    problems.push(
      `retryAfter ${JSON.stringify(retryAfterField)} does not match Retry-After ${JSON.stringify(retryAfter)}`,
    );
  }
  return problems;
}

export interface Check429 {
  /** The cap the 429 details must name. */
  limit?: number;
}

export interface CheckedResult extends RunResult {
  checked429: number;
  bad429: number;
  bad429Samples: string[];
}

/** Checks every 429 of a run as above; counts the bad ones and keeps the problems of the first five. */
export function checker(check: Check429 | undefined) {
  const state = { checked: 0, bad: 0, samples: [] as string[] };
  const inspect = (status: number, body: string, headers: Record<string, unknown>) => {
    if (!check || status !== 429) return;
    state.checked += 1;
    const problems = problemsOf429(body, headers, check.limit);
    if (problems.length > 0) {
      state.bad += 1;
      if (state.samples.length < 5) state.samples.push(problems.join('; '));
    }
  };
  return { state, inspect };
}
