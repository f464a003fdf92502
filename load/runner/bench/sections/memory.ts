/** Memory: RSS of a fresh service process with 500 connections, idle and under load. */
import type { LoadRequest } from '../../autocannon';
import { rssMiB } from '../../children';
import { requestOf } from '../../scenarios';
import { notOk, sampleRss } from '../measure';
import { fmt, say } from '../output';
import type { Bench } from '../setup';

export async function memory(bench: Bench): Promise<void> {
  const { bindings } = bench;
  say();
  say('## Memory: RSS of the service process (a fresh one) with 500 connections');
  const service = await bench.startService('service-rss');
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
  for (const [name, value, note] of lines) say(`  ${name.padEnd(52)} ${value.toFixed(0).padStart(5)} MiB  ${note}`);
  const most = Math.max(idleConnections, config.rss, proxy.rss);
  const megabytes = (most * 1048576) / 1e6;
  bench.goals.push({
    goal: 'RSS <= 250 MB with 500 connections',
    figure: `${megabytes.toFixed(0)} MB (${most.toFixed(0)} MiB) at most; ${((idleConnections * 1048576) / 1e6).toFixed(0)} MB with 500 idle ones`,
    met: megabytes <= 250,
  });
  bench.results.memory = { idle, idleConnections, config, proxy };
}
