/**
 * The service as a real child process, as `npm start` runs it (node --import tsx server/main.ts,
 * one process, so a signal reaches it), for tests that kill it; and a target whose paid requests
 * are held at a fault proxy, so that a test can kill the service between settling its client's
 * payment and our payment reaching the target, through the peers alone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { EvmNetworkName, Peers } from '../../devnet/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { payingFetch, relayRequest } from './relay';

/** Resolves with the child and its URL once it listens; rejects when it exits first or takes over 60 s. */
export function startChildService(
  env: Record<string, string>,
): Promise<{ process: ChildProcess; url: string; logs: string[] }> {
  const started = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
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

/**
 * A fault proxy in front of a target that holds each paid request (one carrying X-PAYMENT or
 * PAYMENT-SIGNATURE) and never passes it on: the target is never paid. When one arrives the
 * service has settled its client's payment and sent its own; `paidArrived` resolves then.
 */
export async function targetHoldingPaidRequests(
  upstream: string,
): Promise<{ proxy: FaultProxy; paidArrived: Promise<void>; close(): Promise<void> }> {
  let arrived: () => void = () => undefined;
  const paidArrived = new Promise<void>((resolve) => (arrived = resolve));
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  const proxy = await startFaultProxy({
    upstream,
    beforeForward: async ({ headers }) => {
      if (headers['x-payment'] === undefined && headers['payment-signature'] === undefined) return;
      arrived();
      await released;
      throw new Error('a held paid request is dropped');
    },
  });
  return {
    proxy,
    paidArrived,
    async close() {
      release();
      await proxy.close();
    },
  };
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
 * The harness's client pays a /relay to `targetUrl` (behind targetHoldingPaidRequests) through the
 * child service at `serviceUrl`; resolves once the service's paid request reached the target's
 * proxy, with the call still in flight (its status, or the error it ended with).
 */
export async function relayUntilTargetIsPaid(
  peers: Peers,
  network: EvmNetworkName,
  serviceUrl: string,
  targetUrl: string,
  paidArrived: Promise<void>,
  headers: Record<string, string> = {},
): Promise<{ paying: Promise<{ status: number } | { error: unknown }> }> {
  const paying = payingFetch(peers, network)(
    `${serviceUrl}/relay`,
    relayRequest({ api_url: targetUrl, method: 'GET' }, headers),
  ).then(
    (response) => ({ status: response.status }),
    (error: unknown) => ({ error }),
  );
  const first = await Promise.race([paidArrived.then(() => undefined), paying.then((ended) => ({ ended }))]);
  if (first) throw new Error(`the relay ended before the target was paid: ${JSON.stringify(first.ended)}`);
  return { paying };
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
