/**
 * `npx tsx devnet/startupTime.ts [runs] [--keep-data] [--tsx]`: how long the sandbox of `npm start`
 * takes to answer 200 on /health/ready, measured as a user meets it. Each run starts `npm start`'s
 * own command (the "start" script of package.json, run by sh as npm runs it: the build of dist/
 * when it is not up to date, then node on dist/main.js) in a process group of its own with nothing
 * configured, polls /health/ready, prints the time to the first 200 with the time of the log lines
 * that mark the phases (a build when there was one, the sandbox's peers started, the embedded
 * Postgres migrated, listening), the CPU seconds the group used by then and the machine's load,
 * then stops the group with SIGTERM. Every run gets a fresh DATA_DIR (initdb and every migration
 * included), or with --keep-data one DATA_DIR for all runs (a restart: the second run on). With
 * --tsx it runs the TypeScript sources through tsx instead (node --import tsx server/main.ts, as
 * the tests start the service).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const READY_BOUND_MS = 180_000;
const STOP_BOUND_MS = 30_000;
const POLL_MS = 20;
/** The log lines that mark a phase of the start. */
const PHASES = ['sandbox peers started', 'database migrated', 'listening'];
/** What tools/build.mjs prints when it has built dist/. */
const BUILT = /^built \d+ files in dist\//;
/** The flags of the start script, for the service run through tsx. */
const NODE_FLAGS = ['--heap-growing-percent=75', '--max-semi-space-size=16'];

/** `npm start`'s command as npm runs it (sh -c, node_modules/.bin first on PATH), or the sources through tsx. */
function startCommand(tsx: boolean): { file: string; args: string[] } {
  if (tsx) return { file: process.execPath, args: [...NODE_FLAGS, '--import', 'tsx', 'server/main.ts'] };
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } };
  return { file: '/bin/sh', args: ['-c', manifest.scripts.start] };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address === null || typeof address === 'string') reject(new Error('no port'));
        else resolve(address.port);
      });
    });
  });
}

/** CPU seconds used so far by the processes of a group and the children they waited for. */
function groupCpuSeconds(groupId: number): number {
  const ticksPerSecond = 100;
  let ticks = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) !== groupId) continue;
      ticks += [11, 12, 13, 14].reduce((sum, index) => sum + Number(fields[index]), 0);
    } catch {
      // the process ended meanwhile
    }
  }
  return ticks / ticksPerSecond;
}

async function measureOnce(dataDir: string, tsx: boolean): Promise<string> {
  const port = await freePort();
  // Nothing configured, as on a fresh machine: no wallet key, no RPC URL, no database.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !/^(EVM_PRIVATE_KEY|SOLANA_PRIVATE_KEY|RPC_URL_.*|DATABASE_URL|NODE_ENV)$/.test(name),
    ),
  );
  const command = startCommand(tsx);
  const started = performance.now();
  const child = spawn(command.file, command.args, {
    cwd: ROOT,
    env: {
      ...env,
      PATH: `${path.join(ROOT, 'node_modules/.bin')}${path.delimiter}${env.PATH ?? ''}`,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const groupId = child.pid;
  if (groupId === undefined) throw new Error('npm start did not start');
  const marks: string[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    if (BUILT.test(line)) marks.push(`${line} (ended ${Math.round(performance.now() - started)} ms)`);
    if (!line.startsWith('{')) return;
    try {
      const { msg } = JSON.parse(line) as { msg?: string };
      if (msg !== undefined && PHASES.includes(msg)) marks.push(`${msg} ${Math.round(performance.now() - started)} ms`);
    } catch {
      // the banner, not a log line
    }
  });
  const stderr: string[] = [];
  child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`npm start exited: ${stderr.join('')}`);
      const elapsedMs = performance.now() - started;
      if (elapsedMs > READY_BOUND_MS) throw new Error(`/health/ready did not answer 200 within ${READY_BOUND_MS} ms`);
      const status = await fetch(`http://127.0.0.1:${port}/health/ready`).then(
        (response) => response.status,
        () => 0,
      );
      if (status === 200) {
        const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
        return `ready after ${Math.round(elapsedMs)} ms (${marks.join(', ')}); CPU ${groupCpuSeconds(groupId).toFixed(1)} s; load ${load}`;
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  } finally {
    process.kill(-groupId, 'SIGTERM');
    const bound = setTimeout(() => process.kill(-groupId, 'SIGKILL'), STOP_BOUND_MS);
    await exited;
    clearTimeout(bound);
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const keepData = args.includes('--keep-data');
  const tsx = args.includes('--tsx');
  const runs = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 3);
  const parent = path.join(ROOT, '.tmp');
  mkdirSync(parent, { recursive: true });
  const kept = keepData ? mkdtempSync(path.join(parent, 'startup-time-')) : undefined;
  try {
    for (let run = 1; run <= runs; run++) {
      const dataDir = kept ?? mkdtempSync(path.join(parent, 'startup-time-'));
      try {
        process.stdout.write(`run ${run}: ${await measureOnce(dataDir, tsx)}\n`);
      } finally {
        if (!kept) rmSync(dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    if (kept) rmSync(kept, { recursive: true, force: true });
  }
}

await main();
