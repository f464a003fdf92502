// The lines a start logs, on a terminal and in a pipe: readable on a terminal (a pseudo-terminal
// made by util-linux's `script`), one JSON object a line in a pipe. The start stops at a database
// that never answers, after its first lines.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const ENV = {
  NODE_ENV: 'production',
  EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
  NETWORKS: 'base-sepolia',
  RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
  DATABASE_URL: 'postgres://127.0.0.1:9/never',
  DATA_DIR: '.tmp/log-lines-never-created',
  PORT: '0',
  HOST: '127.0.0.1',
};

function run(command: string, args: string[]): Promise<{ status: number | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: root,
      env: { ...process.env, ...ENV },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout });
    });
  });
}

describe('the log lines of a start', () => {
  it('are readable on a terminal', async () => {
    const service = `${process.execPath} --import tsx server/main.ts`;
    const { stdout } = await run('script', ['-qec', service, '/dev/null']);
    const lines = stdout.split(/\r?\n/).filter((line) => /^\d\d:\d\d:\d\d\.\d{3} /.test(line));
    expect(lines.some((line) => / INFO {2}secp256k1: /.test(line))).toBe(true);
    expect(lines.some((line) => / FATAL the service could not start/.test(line))).toBe(true);
    expect(stdout).not.toContain('{"level"');
  }, 70_000);

  it('are JSON in a pipe', async () => {
    const { status, stdout } = await run(process.execPath, ['--import', 'tsx', 'server/main.ts']);
    expect(status).toBe(1);
    const lines = stdout.trim().split('\n');
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) expect(() => JSON.parse(line) as unknown).not.toThrow();
    expect(lines.map((line) => (JSON.parse(line) as { msg: string }).msg)).toContain('the service could not start');
  }, 70_000);
});
