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
  const names = Object.keys(healthChecks);
  const results = await Promise.all(names.map((name) => bounded(healthChecks[name])));
  const checks = Object.fromEntries(names.map((name, index) => [name, results[index]]));
  const failed = names.filter((_name, index) => results[index] !== 'ok');
  if (failed.length > 0) {
    ctx.log.warn({ checks }, 'health check failed');
    return { status: 503, body: { status: 'unavailable', checks } };
  }
  return { status: 200, body: { status: 'ok', checks } };
};
