// `npm start` with NODE_ENV=production and no DATABASE_URL: no surprise database. The process
// refuses with one clear line on stderr and a failing exit code, before it starts anything.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MALFORMED_WITH_SECRETS, SECRET, URL_VARIABLES } from '../support/url-variables';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** `npm start` as a process with `env` on top of this one's; it must stop before it starts anything. */
function startProduction(env: Record<string, string | undefined>) {
  return spawnSync(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      NODE_ENV: 'production',
      EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
      DATA_DIR: '.tmp/production-start-never-created',
      PORT: '0',
      ...env,
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

describe('a production start without DATABASE_URL', () => {
  it('refuses with one line naming DATABASE_URL and EMBEDDED_POSTGRES=allow', () => {
    const run = startProduction({
      NETWORKS: 'base-sepolia',
      RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
      DATABASE_URL: undefined,
    });
    expect(run.status).toBe(1);
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^payment-routing-service: configuration error: DATABASE_URL: is required in production .*EMBEDDED_POSTGRES=allow/,
    );
    expect(run.stdout).not.toContain('embedded Postgres');
  }, 70_000);
});

describe('a start with a malformed URL that carries a secret', () => {
  // One malformed form per variable, every form used: each stops the start before anything runs.
  it.each(
    URL_VARIABLES.map((variable, index) => [
      variable,
      MALFORMED_WITH_SECRETS[index % MALFORMED_WITH_SECRETS.length] ?? '',
    ]),
  )(
    '%s=%s exits with one line naming the variable, never the secret',
    (variable, value) => {
      const run = startProduction({
        EMBEDDED_POSTGRES: 'allow',
        SOLANA_PRIVATE_KEY: JSON.stringify(Array.from({ length: 64 }, (_, i) => i)),
        [variable]: value,
      });
      expect(run.status).toBe(1);
      expect(run.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(new RegExp(`^payment-routing-service: configuration error: ${variable}: `)) as string,
      ]);
      expect(run.stderr + run.stdout).not.toContain(SECRET);
      expect(run.stdout).toBe('');
    },
    70_000,
  );
});
