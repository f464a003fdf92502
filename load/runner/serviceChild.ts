/**
 * The service as the bench runs it: `npm start`'s entry point (server/main.ts) in a child process
 * pinned to the server core, configured only through the environment, ready once GET /health
 * answers 200. Stopped with SIGTERM (graceful: it stops its embedded Postgres last).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { freePort, lifetimeCpuMs, spawnChild, type Child } from './children';

export interface ServiceChild {
  child: Child;
  url: string;
  pid: number;
  /** The database the service uses (DATABASE_URL, or the embedded one it started in DATA_DIR). */
  databaseUrl: string;
  /** CPU time the process used from its start until it answered GET /health. */
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

export async function startServiceChild(options: ServiceChildOptions): Promise<ServiceChild> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = await spawnChild({
    name: options.name,
    core: options.core,
    script: options.built ? 'dist/main.js' : 'server/main.ts',
    plain: options.built === true,
    nodeFlags: options.nodeFlags,
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
  for (;;) {
    if (exitCode !== undefined)
      throw new Error(`${options.name} exited with code ${exitCode}:\n${child.output()}\n${logTail()}`);
    if (Date.now() > deadline) {
      await child.stop(5_000);
      throw new Error(`${options.name} did not answer GET /health in time:\n${child.output()}\n${logTail()}`);
    }
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      await response.text();
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  // CPU from start to the first answer of GET /health (the polling adds a few milliseconds).
  const startCpuMs = lifetimeCpuMs(child.pid) ?? NaN;
  let databaseUrl = options.env.DATABASE_URL;
  if (!databaseUrl) {
    databaseUrl = (
      JSON.parse(readFileSync(path.join(options.dataDir, 'postgres-connection.json'), 'utf8')) as { url: string }
    ).url;
  }
  return { child, url, pid: child.pid, databaseUrl, startCpuMs, stop: () => child.stop(30_000) };
}
