// `npm start` with NODE_ENV=production and no DATABASE_URL: no surprise database. The process
// refuses with one clear line on stderr and a failing exit code, before it starts anything.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

describe('a production start without DATABASE_URL', () => {
  it('refuses with one line naming DATABASE_URL and EMBEDDED_POSTGRES=allow', () => {
    const env: Record<string, string | undefined> = {
      ...process.env,
      NODE_ENV: 'production',
      EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
      NETWORKS: 'base-sepolia',
      RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
      DATA_DIR: '.tmp/production-start-never-created',
      PORT: '0',
    };
    delete env.DATABASE_URL;
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
      cwd: root,
      env,
      encoding: 'utf8',
      timeout: 60_000,
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
  const secret = 'S3CRETpw';
  // One malformed form per variable, every form used: each stops the start before anything runs.
  const forms = [
    `http://u:${secret}@h:99999/`,
    `http://u:${secret}@rpc example.org/v2/${secret}`,
    `u:${secret}@rpc.example.org/${secret}`,
    `http://u:${secret}@/?key=${secret}`,
  ];
  const variables = [
    'RPC_URL_BASE',
    'RPC_URL_BASE_SEPOLIA',
    'RPC_URL_SKALE_BASE',
    'RPC_URL_SKALE_BASE_SEPOLIA',
    'RPC_URL_SOLANA',
    'RPC_URL_SOLANA_DEVNET',
    'FACILITATOR_URL',
    'LLM_BASE_URL',
    'PUBLIC_BASE_URL',
    'DATABASE_URL',
  ];

  it.each(variables.map((variable, index) => [variable, forms[index % forms.length] ?? '']))(
    '%s=%s exits with one line naming the variable, never the secret',
    (variable, value) => {
      const env: Record<string, string | undefined> = {
        ...process.env,
        NODE_ENV: 'production',
        EMBEDDED_POSTGRES: 'allow',
        EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
        SOLANA_PRIVATE_KEY: JSON.stringify(Array.from({ length: 64 }, (_, i) => i)),
        DATA_DIR: '.tmp/production-start-never-created',
        PORT: '0',
        [variable]: value,
      };
      const run = spawnSync(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
        cwd: root,
        env,
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(new RegExp(`^payment-routing-service: configuration error: ${variable}: `)) as string,
      ]);
      expect(run.stderr + run.stdout).not.toContain(secret);
      expect(run.stdout).toBe('');
    },
    70_000,
  );
});
