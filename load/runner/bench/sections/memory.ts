/**
 * Memory and start: RSS of a fresh service process with 500 connections, idle and under load, and
 * the CPU it took to start on a migrated database, for `npm start`'s way (tsx over the sources) and
 * `npm run serve`'s (node over dist/, built first), side by side, each with its script's node flags.
 */
import { spawnSync } from 'node:child_process';
import type { LoadRequest } from '../../autocannon';
import { rssMiB } from '../../children';
import { requestOf } from '../../scenarios';
import { notOk, sampleRss } from '../measure';
import { fmt, say } from '../output';
import type { Bench } from '../setup';

const WAYS = [
  { name: 'npm start (tsx over the sources)', built: false },
  { name: 'npm run serve (node over dist/)', built: true },
] as const;

export async function memory(bench: Bench): Promise<void> {
  const built = spawnSync(process.execPath, ['tools/build.mjs'], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`npm run build failed: ${built.stderr}`);
  const figures: Record<string, Awaited<ReturnType<typeof measureWay>>> = {};
  for (const way of WAYS) figures[way.name] = await measureWay(bench, way);
  const served = figures[WAYS[1].name];
  if (served === undefined) return;
  const mb = (mib: number) => (mib * 1048576) / 1e6;
  bench.goals.push({
    goal: 'served: idle RSS <= 160 MiB',
    figure: `${served.idle.toFixed(0)} MiB (npm start: ${figures[WAYS[0].name]?.idle.toFixed(0) ?? '?'} MiB)`,
    met: served.idle <= 160,
  });
  bench.goals.push({
    goal: 'served: CPU from start to listening <= 1.5 s',
    figure: `${(served.startCpuMs / 1000).toFixed(2)} s (npm start: ${((figures[WAYS[0].name]?.startCpuMs ?? NaN) / 1000).toFixed(2)} s)`,
    met: served.startCpuMs <= 1500,
  });
  bench.goals.push({
    goal: 'served: RSS <= 250 MiB with 500 connections',
    figure: `${served.most.toFixed(0)} MiB at most (${mb(served.most).toFixed(0)} MB); npm start: ${figures[WAYS[0].name]?.most.toFixed(0) ?? '?'} MiB`,
    met: served.most <= 250,
  });
  bench.results.memory = figures;
}

async function measureWay(bench: Bench, way: (typeof WAYS)[number]) {
  const { bindings } = bench;
  say();
  say(`## Memory and start: ${way.name}, a fresh process, with 500 connections`);
  // The first start migrates the database; the measured one starts on a migrated database.
  // Each way runs with its npm script's node flags (startServiceChild reads them from package.json).
  await bench.stopService(await bench.startService('service-rss-migrate', {}, [], way.built));
  const service = await bench.startService('service-rss', {}, [], way.built);
  const { startCpuMs } = service;
  await bench.autocannon(service.url, requestOf('config', bindings), { connections: 10, duration: 1 });
  await bench.autocannon(service.url, requestOf('proxyFree', bindings), { connections: 10, duration: 1 });
  const idle = rssMiB(service.pid) ?? NaN;
  const opened = await bench.loadgen.call<{ open: number; failed: number }>('open', {
    baseUrl: service.url,
    count: 500,
    path: '/health',
  });
  await new Promise((resolve) => setTimeout(resolve, 500));
  const idleConnections = rssMiB(service.pid) ?? NaN;
  await bench.loadgen.call('close');
  const underLoad = async (request: LoadRequest) => {
    const running = bench.autocannon(service.url, request, { connections: 500 });
    const rss = await sampleRss(service.pid, running);
    return { rss: rss.maxMiB, result: await running };
  };
  const config = await underLoad(requestOf('config', bindings));
  const proxy = await underLoad(requestOf('proxyFree', bindings));
  await bench.stopService(service);
  const lines: Array<[string, number, string]> = [
    ['after a warm-up, idle', idle, ''],
    ['500 idle keep-alive connections', idleConnections, `${opened.open} open, ${opened.failed} failed`],
    [
      '500 connections of GET /config (max)',
      config.rss,
      `${fmt.rps(config.result.rps)} req/s, p99 ${fmt.ms(config.result.latency.p99)} ms, ${notOk(config.result)} not 200`,
    ],
    [
      '500 connections of POST /proxy pass-through (max)',
      proxy.rss,
      `${fmt.rps(proxy.result.rps)} req/s, p99 ${fmt.ms(proxy.result.latency.p99)} ms, ${notOk(proxy.result)} not 200`,
    ],
  ];
  say(`  ${'CPU from start to listening'.padEnd(52)} ${(startCpuMs / 1000).toFixed(2).padStart(5)} s`);
  for (const [name, value, note] of lines) say(`  ${name.padEnd(52)} ${value.toFixed(0).padStart(5)} MiB  ${note}`);
  const most = Math.max(idleConnections, config.rss, proxy.rss);
  return { startCpuMs, idle, idleConnections, most, config, proxy };
}
