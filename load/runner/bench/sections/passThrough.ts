/**
 * Pass-through: POST /proxy to a free x402 target against a bare Node forwarder to the same target,
 * and against that forwarder inside express and openapi-backend (load/runner/stackForwarder.ts):
 * what the stack the goal keeps costs by itself.
 */
import type { LoadRequest } from '../../autocannon';
import { announcedUrl, spawnChild } from '../../children';
import { requestOf } from '../../scenarios';
import type { ServiceChild } from '../../serviceChild';
import { alternate } from '../measure';
import { bundleChild } from './verify';
import { fmt, say, SERVER_CORE, table } from '../output';
import type { Bench } from '../setup';

export async function passThrough(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  say();
  say(
    `## Pass-through: POST /proxy to a free x402 target vs a bare Node forwarder to the same target (${options.connections} connections)`,
  );
  const [forwarder, forwarderPerCall, stackForwarder] = await Promise.all([
    spawnChild({
      name: 'forwarder',
      core: SERVER_CORE,
      script: 'load/runner/forwarder.ts',
      ipc: true,
      env: { BENCH_FORWARDER_AGENT: 'keepalive' },
    }),
    spawnChild({
      name: 'forwarder-per-call',
      core: SERVER_CORE,
      script: 'load/runner/forwarder.ts',
      ipc: true,
      env: { BENCH_FORWARDER_AGENT: 'none' },
    }),
    // Built as the service is (bundled, run by plain node), so the two compare like for like.
    bundleChild('load/runner/stackForwarder.ts', 'stack-forwarder').then((script) =>
      spawnChild({ name: 'stack-forwarder', core: SERVER_CORE, script, plain: true, ipc: true }),
    ),
  ]);
  const forwarded: LoadRequest = {
    method: 'POST',
    path: '/',
    body: JSON.stringify({ api_url: bindings.freeUrl, method: 'GET' }),
  };
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const proxyRequest = requestOf('proxyFree', bindings);
  // The same request stopped earlier in the service: where /proxy's own time goes.
  const withoutKey: LoadRequest = { ...proxyRequest, headers: {} };
  const refusedTarget: LoadRequest = {
    ...proxyRequest,
    body: JSON.stringify({ api_url: 'http://10.0.0.1/free', method: 'GET' }),
  };
  const ofService = { pid: service.pid, ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}) };
  const rows = await alternate(
    [
      {
        name: 'bare forwarder (keep-alive to the target)',
        pid: forwarder.pid,
        run: (warmup) => bench.autocannon(announcedUrl(forwarder), forwarded, duration(warmup)),
      },
      {
        name: 'bare forwarder (a connection per call)',
        pid: forwarderPerCall.pid,
        run: (warmup) => bench.autocannon(announcedUrl(forwarderPerCall), forwarded, duration(warmup)),
      },
      {
        name: 'the forwarder in express and openapi-backend',
        pid: stackForwarder.pid,
        run: (warmup) => bench.autocannon(announcedUrl(stackForwarder), proxyRequest, duration(warmup)),
      },
      {
        name: 'POST /proxy pass-through',
        ...ofService,
        run: (warmup) => bench.autocannon(service.url, proxyRequest, duration(warmup)),
      },
      {
        name: '  the same without x-api-key (401)',
        ...ofService,
        expectedStatus: 401,
        run: (warmup) => bench.autocannon(service.url, withoutKey, duration(warmup)),
      },
      {
        name: '  with the key, target refused by the guard (400)',
        ...ofService,
        expectedStatus: 400,
        run: (warmup) => bench.autocannon(service.url, refusedTarget, duration(warmup)),
      },
    ],
    options.rounds,
  );
  await Promise.all([forwarder.stop(), forwarderPerCall.stop(), stackForwarder.stop()]);
  const [keepAlive, perCall, stack, proxy, noKey, refused] = rows;
  const ratio = proxy.row.rps / keepAlive.row.rps;
  // The same forward in express and openapi-backend, with nothing of ours: the most the stack allows.
  const stackRatio = stack.row.rps / keepAlive.row.rps;
  stack.row.note = `${fmt.pct(stackRatio)} of the keep-alive forwarder: the stack alone ${stack.row.note ?? ''}`.trim();
  proxy.row.note =
    `${fmt.pct(ratio)} of the keep-alive forwarder, ${fmt.pct(proxy.row.rps / perCall.row.rps)} of the per-call one ${proxy.row.note ?? ''}`.trim();
  noKey.row.note = `${noKey.row.note ?? ''} HTTP, express, openapi-backend, logging; no database`.trim();
  refused.row.note =
    `${refused.row.note ?? ''} + the API key (from memory once known), body validation, the SSRF check; nothing sent`.trim();
  say(table(rows.map((measured) => measured.row)));
  const micro = (value: number | undefined) =>
    value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(0);
  say(
    `  CPU per /proxy call, server side: ${micro((proxy.row.cpuUs ?? NaN) + (proxy.row.dbCpuUs ?? 0))} us (service ${micro(proxy.row.cpuUs)}, Postgres ${micro(proxy.row.dbCpuUs)}) ` +
      `against the forwarder's ${micro(keepAlive.row.cpuUs)} us (${micro(perCall.row.cpuUs)} us with a connection per call); of the service's: ` +
      `${micro(noKey.row.cpuUs)} us to answer at all, ${micro((refused.row.cpuUs ?? NaN) - (noKey.row.cpuUs ?? NaN))} us more (and ${micro(refused.row.dbCpuUs)} us of Postgres) for the key, body validation and the SSRF check, ` +
      `${micro((proxy.row.cpuUs ?? NaN) - (refused.row.cpuUs ?? NaN))} us more for the call to the target (the target's own work is in neither column). ` +
      `The forward in express and openapi-backend alone: ${micro(stack.row.cpuUs)} us.`,
  );
  bench.goals.push({
    goal: "/proxy pass-through >= 50% of the keep-alive forwarder's req/s",
    figure:
      `${fmt.pct(ratio)} (${fmt.rps(proxy.row.rps)} vs ${fmt.rps(keepAlive.row.rps)} req/s); ` +
      `the same forward in express and openapi-backend with nothing of ours: ${fmt.pct(stackRatio)}` +
      (stackRatio < 0.5 ? ' (the stack alone is short of the goal in this run)' : ''),
    met: ratio >= 0.5,
  });
  bench.results.passThrough = rows;
}
