// `npm start` with nothing configured, run as a user runs it: a real process (server/main.ts under
// tsx) in a process group of its own, as a terminal or a supervisor starts it, with its embedded
// Postgres in DATA_DIR. A script that waits for the health endpoints finds sandbox.json and a
// working demo key; a signal to the whole group after paid traffic (Ctrl-C in a terminal, a
// supervisor stopping the group) stops it with no error-level line, the database last.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../db/embedded';
import type { SandboxState } from '../../devnet/sandbox';
import { contractClient } from '../support/contract';

const root = fileURLToPath(new URL('../..', import.meta.url));
const START_BOUND_MS = 90_000;
const STOP_BOUND_MS = 30_000;
const directories: string[] = [];
afterAll(() => {
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});

interface LogLine {
  level: number;
  msg?: string;
}

interface RunningSandbox {
  child: ChildProcess;
  url: string;
  dataDir: string;
  logs: LogLine[];
  stderr: string[];
}

function startSandboxProcess(port: number): RunningSandbox {
  const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'sandbox-start-'));
  directories.push(dataDir);
  // Nothing configured, as on a fresh machine: no wallet key, no RPC URL, no database.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !/^(EVM_PRIVATE_KEY|SOLANA_PRIVATE_KEY|RPC_URL_.*|DATABASE_URL|NODE_ENV)$/.test(name),
    ),
  );
  const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
    cwd: root,
    env: { ...env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'info' },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const running: RunningSandbox = { child, url: `http://127.0.0.1:${port}`, dataDir, logs: [], stderr: [] };
  createInterface({ input: child.stdout }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    try {
      running.logs.push(JSON.parse(line) as LogLine);
    } catch {
      // the banner, not a log line
    }
  });
  child.stderr.on('data', (chunk: Buffer) => running.stderr.push(chunk.toString()));
  return running;
}

/** Polls `path` every few milliseconds until it first answers 200, and returns what sandbox.json held at that moment. */
async function firstReady(running: RunningSandbox, probePath: string): Promise<{ state: unknown; polls: number[] }> {
  const deadline = Date.now() + START_BOUND_MS;
  const polls: number[] = [];
  for (;;) {
    if (running.child.exitCode !== null) throw new Error(`the sandbox exited: ${running.stderr.join('')}`);
    if (Date.now() > deadline) throw new Error(`${probePath} never answered 200 within ${START_BOUND_MS} ms`);
    const status = await fetch(`${running.url}${probePath}`).then(
      (response) => response.status,
      () => 0,
    );
    if (status === 200) {
      // What a script reads right after its wait: the file must be whole and its key working.
      const file = path.join(running.dataDir, 'sandbox.json');
      const state: unknown = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : undefined;
      return { state, polls };
    }
    if (status !== 0) polls.push(status);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function stopGroup(running: RunningSandbox, signal: NodeJS.Signals): Promise<number | null> {
  const exited = new Promise<number | null>((resolve) => running.child.once('exit', (code) => resolve(code)));
  process.kill(-running.child.pid!, signal);
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      process.kill(-running.child.pid!, 'SIGKILL');
      reject(new Error(`the sandbox did not stop within ${STOP_BOUND_MS} ms`));
    }, STOP_BOUND_MS);
  });
  return Promise.race([exited, bound]).finally(() => clearTimeout(timer));
}

describe.each(['SIGTERM', 'SIGINT'] as const)(
  'a sandbox started by npm start, stopped by %s to its process group',
  (signal) => {
    it(
      'has sandbox.json and a working demo key when /health and /health/ready first answer 200, and stops with no error line after paid traffic',
      async () => {
        const running = startSandboxProcess(await freePort());
        try {
          const [ready, health] = await Promise.all([
            firstReady(running, '/health/ready'),
            firstReady(running, '/health'),
          ]);
          for (const seen of [ready, health]) {
            expect(seen.state).toMatchObject({
              baseUrl: running.url,
              apiKey: expect.stringMatching(/^prs_/) as string,
            });
            // Anything answered before it was ready said it was not: 503, never another 200 body.
            expect(seen.polls.every((status) => status === 503)).toBe(true);
          }
          const state = ready.state as SandboxState;
          const client = contractClient(running.url);
          const probe = await client.get('/health/ready');
          expect(probe.status).toBe(200);
          expect(probe.body.checks).toMatchObject({ sandbox: 'ok', database: 'ok' });

          const balance = await client.get('/v1/credits/balance', { headers: { 'x-api-key': state.apiKey } });
          expect(balance.status).toBe(200);
          const paid = await client.post(
            '/proxy',
            { api_url: `${state.targets['base-sepolia']}/paid`, method: 'GET' },
            { headers: { 'x-api-key': state.apiKey } },
          );
          expect(paid.status, paid.text).toBe(200);

          expect(await stopGroup(running, signal)).toBe(0);
          const errors = running.logs.filter((line) => line.level >= 50);
          expect(errors, JSON.stringify(running.logs.slice(-25).map((line) => [line.level, line.msg]))).toEqual([]);
          expect(running.logs.at(-1)?.msg).toBe('stopped');
          // The database was stopped by the service, last, and cleanly: no pid file is left.
          expect(existsSync(path.join(running.dataDir, 'postgres', 'postmaster.pid'))).toBe(false);
        } finally {
          if (running.child.exitCode === null) process.kill(-running.child.pid!, 'SIGKILL');
        }
      },
      START_BOUND_MS + STOP_BOUND_MS + 30_000,
    );
  },
);
