/**
 * The service as a real child process (node --import tsx test/support/pausing-service.ts, one
 * process, so a signal reaches it), for tests that kill it: it pauses after each settlement of a
 * client's payment until `markerFile` (which it creates) is removed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { EvmNetworkName, Peers } from '../../devnet/index';
import { payingFetch, relayRequest } from './relay';

/** Resolves with the child and its URL once it listens; rejects when it exits first or takes over 60 s. */
export function startChildService(
  env: Record<string, string>,
  markerFile: string,
): Promise<{ process: ChildProcess; url: string; logs: string[] }> {
  const started = spawn(process.execPath, ['--import', 'tsx', 'test/support/pausing-service.ts', markerFile], {
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
    env: { ...process.env, ...env, LOG_LEVEL: 'info', NODE_ENV: 'test' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const errors: string[] = [];
  const logs: string[] = [];
  started.stderr.on('data', (chunk: Buffer) => errors.push(chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`the service did not start: ${errors.join('')}`));
    }, 60_000);
    started.once('exit', (code) => {
      reject(new Error(`the service exited with ${code}: ${errors.join('')} ${logs.join('\n')}`));
    });
    createInterface({ input: started.stdout }).on('line', (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === 'listening' && entry.url) {
          clearTimeout(timer);
          resolve({ process: started, url: entry.url, logs });
        }
      } catch {
        // not a log line
      }
    });
  });
}

/** Kills the child with SIGKILL and resolves once it is gone. */
export async function killChild(child: ChildProcess): Promise<NodeJS.Signals | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.signalCode;
  const exited = new Promise<NodeJS.Signals | null>((resolve) =>
    child.once('exit', (_code, signal) => resolve(signal)),
  );
  child.kill('SIGKILL');
  return exited;
}

/** Stops the child with SIGTERM (a graceful stop) and resolves once it is gone. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  await exited;
}

/**
 * The harness's client pays a /relay to `targetUrl` through the child service at `serviceUrl`, which
 * pauses once the client's payment settled: the relay transaction's id it wrote to `markerFile`
 * then, and the call still in flight (its status, or the error it ended with).
 */
export async function relayUntilSettled(
  peers: Peers,
  network: EvmNetworkName,
  serviceUrl: string,
  targetUrl: string,
  markerFile: string,
): Promise<{ relayTxId: string; paying: Promise<{ status: number } | { error: unknown }> }> {
  const paying = payingFetch(peers, network)(
    `${serviceUrl}/relay`,
    relayRequest({ api_url: targetUrl, method: 'GET' }),
  ).then(
    (response) => ({ status: response.status }),
    (error: unknown) => ({ error }),
  );
  const relayTxId = await waitFor('the settlement', () =>
    existsSync(markerFile) ? readFileSync(markerFile, 'utf8') || undefined : undefined,
  );
  return { relayTxId, paying };
}

export async function waitFor<T>(
  what: string,
  read: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
