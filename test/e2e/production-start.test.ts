// `npm start` with NODE_ENV=production and no DATABASE_URL: no surprise database. The process
// refuses with one clear line on stderr and a failing exit code, before it starts anything.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  MALFORMED_WITH_SECRETS,
  partsOfSecretIn,
  passwordWithoutHost,
  SECRET,
  URL_VARIABLES,
} from '../support/url-variables';

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
      expect(partsOfSecretIn(run.stderr + run.stdout)).toEqual([]);
      expect(run.stdout).toBe('');
    },
    70_000,
  );

  // A password with no "@host" after it reads as a port that is not a number: the URL does not
  // parse, and the message shows its scheme alone.
  it.each(URL_VARIABLES.map((variable, index) => [variable, passwordWithoutHost(variable, index)]))(
    '%s=%s (a password and no @host) exits naming the variable, with no part of the password',
    (variable, value) => {
      const run = startProduction({
        EMBEDDED_POSTGRES: 'allow',
        SOLANA_PRIVATE_KEY: JSON.stringify(Array.from({ length: 64 }, (_, i) => i)),
        [variable]: value,
      });
      expect(run.status).toBe(1);
      expect(run.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(`^payment-routing-service: configuration error: ${variable}: .* \\((https|postgres)://\\)$`),
        ) as string,
      ]);
      expect(partsOfSecretIn(run.stderr + run.stdout)).toEqual([]);
      expect(run.stderr).not.toContain('alice');
      expect(run.stdout).toBe('');
    },
    70_000,
  );
});

describe('a start with a query string in FACILITATOR_URL', () => {
  it('exits naming the variable and the query, before any call is made to `...?k=v/settle`', () => {
    const run = startProduction({
      EMBEDDED_POSTGRES: 'allow',
      SOLANA_PRIVATE_KEY: JSON.stringify(Array.from({ length: 64 }, (_, i) => i)),
      FACILITATOR_URL: `https://facilitator.example.org/key?k=${SECRET}`,
    });
    expect(run.status).toBe(1);
    expect(run.stderr.trim().split('\n')).toEqual([
      'payment-routing-service: configuration error: FACILITATOR_URL: must not carry a query string or a fragment: ' +
        'the service appends paths to it (such as /settle), which would land after them (https://facilitator.example.org)',
    ]);
    expect(run.stdout).toBe('');
  }, 70_000);
});
