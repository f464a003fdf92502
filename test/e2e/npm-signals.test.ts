// `npm start` and `npm run worker` as an operator runs them, then stopped by a signal to the npm
// process alone (what `kill <pid>` or a supervisor that knows only that process does): everything
// the service started (node on the bundle, the embedded Postgres and its backends, the sandbox's
// peers) is gone, and npm exits 0.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../db/embedded';

const root = fileURLToPath(new URL('../..', import.meta.url));
const START_BOUND_MS = 120_000;
const STOP_BOUND_MS = 60_000;
const ORPHAN_BOUND_MS = 20_000;
const directories: string[] = [];
/** Every process seen in a tree here: whatever is still alive at the end is killed, so a failure leaves none. */
const seen = new Set<number>();
afterAll(() => {
  for (const pid of seen) if (alive(pid)) process.kill(pid, 'SIGKILL');
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie has ended; only its parent has not read its status yet.
  const state = execFileSync('ps', ['-o', 'stat=', '-p', String(pid)], { encoding: 'utf8' }).trim();
  return state !== '' && !state.startsWith('Z');
}

/** The processes below `pid`, each with its command line. */
function descendants(pid: number): { pid: number; command: string }[] {
  const rows = execFileSync('ps', ['-eo', 'pid=,ppid=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({ pid: Number(match[1]), ppid: Number(match[2]), command: match[3] ?? '' }));
  const found: { pid: number; command: string }[] = [];
  const parents = [pid];
  while (parents.length > 0) {
    const parent = parents.pop();
    for (const row of rows.filter((candidate) => candidate.ppid === parent)) {
      found.push({ pid: row.pid, command: row.command });
      parents.push(row.pid);
    }
  }
  return found;
}

interface Running {
  npm: ChildProcess;
  output: string[];
}

function npm(script: string[], env: Record<string, string>): Running {
  const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'npm-signals-'));
  directories.push(dataDir);
  // Nothing configured, as on a fresh machine: the sandbox for `npm start`, the embedded Postgres.
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !/^(EVM_PRIVATE_KEY|SOLANA_PRIVATE_KEY|RPC_URL_.*|DATABASE_URL|NODE_ENV|npm_.*)$/.test(name),
    ),
  );
  const child = spawn('npm', script, {
    cwd: root,
    env: { ...base, DATA_DIR: dataDir, HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env },
    // Its own group: the signal below reaches npm alone, not a group it shares with this test.
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const running: Running = { npm: child, output: [] };
  child.stdout.on('data', (chunk: Buffer) => running.output.push(chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => running.output.push(chunk.toString()));
  return running;
}

async function until(running: Running, what: string, done: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + START_BOUND_MS;
  while (!(await done())) {
    if (running.npm.exitCode !== null) throw new Error(`npm exited before ${what}: ${running.output.join('')}`);
    if (Date.now() > deadline) throw new Error(`no ${what} within ${START_BOUND_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Signals npm alone, and answers its exit code with the processes of its tree still alive a moment later. */
async function stop(running: Running, signal: NodeJS.Signals) {
  const tree = descendants(running.npm.pid!);
  for (const { pid } of tree) seen.add(pid);
  const exited = new Promise<number | null>((resolve) => running.npm.once('exit', (code) => resolve(code)));
  running.npm.kill(signal);
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), STOP_BOUND_MS);
  });
  const code = await Promise.race([exited, bound]).finally(() => clearTimeout(timer));
  // A process orphaned by the exit would still be running at the end of this wait; one that is
  // only finishing its own exit (a Postgres backend on a busy machine) is gone within it.
  const settled = Date.now() + ORPHAN_BOUND_MS;
  while (tree.some(({ pid }) => alive(pid)) && Date.now() < settled)
    await new Promise((resolve) => setTimeout(resolve, 250));
  return { code, tree, left: tree.filter(({ pid }) => alive(pid)) };
}

describe.each(['SIGTERM', 'SIGINT'] as const)('%s to the npm process', (signal) => {
  it('of `npm start` (the sandbox) stops the service, its embedded Postgres and its peers, and npm exits 0', async () => {
    const port = await freePort();
    const running = npm(['start'], { PORT: String(port) });
    await until(running, '/health/ready answering 200', () =>
      fetch(`http://127.0.0.1:${port}/health/ready`).then(
        (response) => response.status === 200,
        () => false,
      ),
    );
    const { code, tree, left } = await stop(running, signal);
    expect(tree.map(({ command }) => command).join('\n')).toMatch(/postgres/);
    expect(left).toEqual([]);
    expect(code).toBe(0);
  }, 240_000);
});

describe('SIGTERM to the npm process of `npm run worker`', () => {
  it('stops the worker (node on the bundle, as npm start runs it) and its embedded Postgres, and npm exits 0', async () => {
    const running = npm(['run', 'worker'], {});
    await until(running, 'the worker running', () =>
      Promise.resolve(running.output.join('').includes('worker running')),
    );
    const { code, tree, left } = await stop(running, 'SIGTERM');
    expect(tree.map(({ command }) => command).join('\n')).toMatch(/postgres/);
    expect(tree.map(({ command }) => command).join('\n')).toMatch(/node .*dist\/main\.js --worker-only/);
    expect(left).toEqual([]);
    expect(code).toBe(0);
  }, 240_000);
});
