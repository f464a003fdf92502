import type { Handler } from './types';

/** Each check is bounded: a hung database must turn into a 503, not a hung probe. */
const CHECK_TIMEOUT_MS = 3_000;

function bounded(check: () => Promise<void>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`no answer within ${CHECK_TIMEOUT_MS} ms`), CHECK_TIMEOUT_MS);
  });
  const run = check().then(
    () => 'ok',
    (error: unknown) => (error instanceof Error ? error.message : String(error)) || 'failed',
  );
  return Promise.race([run, timeout]).finally(() => clearTimeout(timer));
}

export const getHealth: Handler<'getHealth'> = async (ctx, { healthChecks }) => {
  const results = await Promise.all(
    Object.entries(healthChecks).map(async ([name, check]) => [name, await bounded(check)] as const),
  );
  const checks = Object.fromEntries(results);
  const failed = results.filter(([, result]) => result !== 'ok');
  if (failed.length > 0) {
    ctx.log.warn({ checks }, 'health check failed');
    return { status: 503, body: { status: 'unavailable', checks } };
  }
  return { status: 200, body: { status: 'ok', checks } };
};
