/** Soak: the soak mix at its rate for a while, with the service's RSS over the run. */
import type { RunResult } from '../../autocannon';
import { rssMiB } from '../../children';
import { requestOf, scenarios, type RequestName } from '../../scenarios';
import type { ServiceChild } from '../../serviceChild';
import { median, type LatencySummary } from '../../stats';
import { sampleRss } from '../measure';
import { say, table } from '../output';
import type { Bench } from '../setup';

export async function soak(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  const { ratePerSecond, mix } = scenarios.soak;
  say();
  say(
    `## Soak: ${ratePerSecond} req/s of the soak mix for ${options.soakS} s (${Object.entries(mix)
      .map(([name, weight]) => `${name} ${weight}`)
      .join(', ')})`,
  );
  const entries = Object.entries(mix).map(([name, weight]) => ({
    name,
    request: requestOf(name as RequestName, bindings),
    weight,
  }));
  const rssBefore = rssMiB(service.pid) ?? NaN;
  type SoakResult = RunResult & { byRequest: Record<string, LatencySummary & { statuses: Record<string, number> }> };
  const running = bench.loadgen.call<SoakResult>(
    'clients',
    { run: { baseUrl: service.url, mix: entries, clients: 20, durationS: options.soakS, ratePerSecond } },
    (options.soakS + 120) * 1000,
  );
  const rss = await sampleRss(service.pid, running, 1000);
  const result = await running;
  say(
    table(
      Object.entries(result.byRequest).map(([name, summary]) => ({
        name,
        rps: summary.count / result.durationS,
        p50: summary.p50,
        p99: summary.p99,
        note: Object.entries(summary.statuses)
          .map(([status, count]) => `${status} x${count}`)
          .join(', '),
      })),
    ),
  );
  const third = Math.max(1, Math.floor(rss.samples.length / 3));
  say(
    `  service RSS ${rssBefore.toFixed(0)} MiB before; median ${median(rss.samples.slice(0, third)).toFixed(0)} MiB over the first third, ` +
      `${median(rss.samples.slice(-third)).toFixed(0)} MiB over the last, max ${rss.maxMiB.toFixed(0)} MiB; ${result.errors} connection errors`,
  );
  bench.results.soak = { result, rssBefore, rss };
}
