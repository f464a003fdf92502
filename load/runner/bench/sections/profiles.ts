/** CPU profiles of the service under pass-through, GET /config, paid /proxy and paid /relay load. */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { RunResult } from '../../autocannon';
import { mainThreadSchedMs, ROOT } from '../../children';
import { formatProfile, summarizeProfile } from '../../profile';
import { requestOf } from '../../scenarios';
import { fmt, say } from '../output';
import { BASE_SEPOLIA_CHAIN_ID, type Bench } from '../setup';
import { PAID_WARMUP_CALLS } from './paid';

export async function profiles(bench: Bench): Promise<void> {
  const { options, bindings, peers } = bench;
  const directory = path.join(ROOT, '.tmp', 'bench-profiles', String(bench.results.runId));
  const paidCalls = (count: number, url: string, mode: 'proxy' | 'relay' = 'proxy') =>
    bench.loadgen.call<RunResult>(
      'paid',
      {
        run: {
          mode,
          url,
          targetUrl: bindings.paidUrl,
          apiKey: bindings.apiKey,
          rpcUrl: peers.rpcUrl,
          chainId: BASE_SEPOLIA_CHAIN_ID,
          clientEvmPrivateKey: peers.clientEvmPrivateKey,
          count,
          concurrency: 1,
        },
      },
      600_000,
    );
  const loads: Array<[string, string, (url: string, warmup: boolean) => Promise<RunResult>]> = [
    [
      'proxy-pass-through',
      `POST /proxy pass-through (${options.connections} connections)`,
      (url, warmup) =>
        bench.autocannon(url, requestOf('proxyFree', bindings), {
          duration: warmup ? options.warmupS : Math.max(5, options.durationS),
        }),
    ],
    [
      'config',
      `GET /config (${options.connections} connections)`,
      (url, warmup) =>
        bench.autocannon(url, requestOf('config', bindings), {
          duration: warmup ? options.warmupS : Math.max(5, options.durationS),
        }),
    ],
    [
      'proxy-paid',
      `paid POST /proxy (one call at a time, ${options.paidCalls} calls)`,
      (url, warmup) => paidCalls(warmup ? PAID_WARMUP_CALLS : options.paidCalls, url),
    ],
    [
      'relay-paid',
      `paid POST /relay, x402-fetch paying (one call at a time, ${options.paidCalls} calls)`,
      (url, warmup) => paidCalls(warmup ? PAID_WARMUP_CALLS : options.paidCalls, url, 'relay'),
    ],
  ];
  for (const [name, title, load] of loads) {
    const dir = path.join(directory, name);
    const service = await bench.startService(`service-profile-${name}`, {}, ['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    await load(service.url, true);
    const schedBefore = mainThreadSchedMs(service.pid);
    const loadStart = performance.now();
    const run = await load(service.url, false);
    const loadEnd = performance.now();
    const schedAfter = mainThreadSchedMs(service.pid);
    await bench.stopService(service);
    const exitedAt = performance.now();
    // The main thread's profile (tsx's loader thread writes its own), and only the measured run.
    const file = readdirSync(dir)
      .filter((entry) => entry.endsWith('.cpuprofile'))
      .sort()[0];
    say();
    say(`## CPU profile of the service under ${title}: ${fmt.rps(run.rps)} req/s`);
    if (!file) {
      say('  no profile was written');
      continue;
    }
    say(`  ${path.relative(ROOT, path.join(dir, file))}`);
    const summary = summarizeProfile(path.join(dir, file), 20, {
      fromMsBeforeEnd: exitedAt - loadStart,
      toMsBeforeEnd: exitedAt - loadEnd,
    });
    say(formatProfile(summary, run.responses).replace(/^/gm, '  '));
    if (schedBefore && schedAfter && run.responses > 0) {
      // The profiler's samples measure wall time: a wait for the core that ends between two samples
      // is charged to the function the main thread was in when it lost the core. On the bench's
      // shared core that is mostly a socket write that woke a peer (Postgres, the target, the chain).
      const perRequest = (ms: number) => fmt.ms(ms / run.responses);
      say(
        `  the main thread over the measured run (/proc schedstat), per request: ${perRequest(schedAfter.onCpuMs - schedBefore.onCpuMs)} ms on its core, ` +
          `${perRequest(schedAfter.waitingMs - schedBefore.waitingMs)} ms runnable and waiting for it; ` +
          'part of that wait shows in the profile as busy time of the function that lost the core (writev, writeLatin1String: a socket write that woke a peer on the same core)',
      );
    }
  }
}
