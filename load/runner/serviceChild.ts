/**
 * The service as the bench runs it: `npm start`'s entry point (server/main.ts) in a child process
 * pinned to the server core, configured only through the environment, ready once GET /health
 * answers 200. Stopped with SIGTERM (graceful: it stops its embedded Postgres last). It runs with
 * the node flags of the npm script it stands for (`npm run serve`'s when built, `npm start`'s when
 * not), read from package.json, so the bench measures what operators run.
 */
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { freePort, lifetimeCpuMs, ROOT, spawnChild, type Child } from './children';

export interface ServiceChild {
  child: Child;
  url: string;
  pid: number;
  /** The database the service uses (DATABASE_URL, or the embedded one it started in DATA_DIR). */
  databaseUrl: string;
  /** CPU time the process used from its start until it listened (within 10 ms). */
  startCpuMs: number;
  stop(): Promise<void>;
}

export interface ServiceChildOptions {
  name: string;
  core?: number;
  dataDir: string;
  env: Record<string, string>;
  nodeFlags?: string[];
  readyTimeoutMs?: number;
  /** `npm run serve`'s way (node dist/main.js, after `npm run build`) instead of `npm start`'s. */
  built?: boolean;
}

/** The node flags of an npm script (package.json): its words that start with `--`, before the entry file. */
export function scriptFlags(script: 'start' | 'serve'): string[] {
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    scripts?: Record<string, string>;
  };
  const words = (manifest.scripts?.[script] ?? '').split(/\s+/).slice(1);
  const entry = words.findIndex((word) => !word.startsWith('--'));
  return entry === -1 ? words : words.slice(0, entry);
}

/** Whether a TCP connection to the port on 127.0.0.1 is accepted (closed at once). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

export async function startServiceChild(options: ServiceChildOptions): Promise<ServiceChild> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = await spawnChild({
    name: options.name,
    core: options.core,
    script: options.built ? 'dist/main.js' : 'server/main.ts',
    plain: options.built === true,
    nodeFlags: [...scriptFlags(options.built ? 'serve' : 'start'), ...(options.nodeFlags ?? [])],
    env: { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: options.dataDir, ...options.env },
    echoStderr: true,
    // pino writes to stdout: a file, as a deployment's log collector would take it.
    stdoutFile: path.join(options.dataDir, `${options.name}.log`),
  });
  const logTail = () => {
    try {
      return readFileSync(path.join(options.dataDir, `${options.name}.log`), 'utf8')
        .split('\n')
        .slice(-20)
        .join('\n');
    } catch {
      return '';
    }
  };
  const deadline = Date.now() + (options.readyTimeoutMs ?? 90_000);
  let exitCode: number | null | undefined;
  void child.exited.then((code) => {
    exitCode = code;
  });
  const check = async () => {
    if (exitCode !== undefined)
      throw new Error(`${options.name} exited with code ${exitCode}:\n${child.output()}\n${logTail()}`);
    if (Date.now() > deadline) {
      await child.stop(5_000);
      throw new Error(`${options.name} did not answer GET /health in time:\n${child.output()}\n${logTail()}`);
    }
  };
  // CPU from start to listening (the kernel accepts a connection once the socket listens, whatever
  // the process is doing): read within 10 ms of it, before the work a service does once it listens
  // (compiling the request validators in the background, starting its worker).
  for (;;) {
    await check();
    if (await accepts(port)) break;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const startCpuMs = lifetimeCpuMs(child.pid) ?? NaN;
  for (;;) {
    await check();
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      await response.text();
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  let databaseUrl = options.env.DATABASE_URL;
  if (!databaseUrl) {
    databaseUrl = (
      JSON.parse(readFileSync(path.join(options.dataDir, 'postgres-connection.json'), 'utf8')) as { url: string }
    ).url;
  }
  return { child, url, pid: child.pid, databaseUrl, startCpuMs, stop: () => child.stop(30_000) };
}
