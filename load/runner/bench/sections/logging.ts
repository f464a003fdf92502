/** Logging: LOG_LEVEL=info (a JSON line per request) against the run's log level. */
import { requestOf } from '../../scenarios';
import type { ServiceChild } from '../../serviceChild';
import { alternate } from '../measure';
import { fmt, say, table } from '../output';
import type { Bench } from '../setup';

export async function logging(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  if (options.logLevel === 'info') return;
  say();
  say(`## Logging: LOG_LEVEL=info (a JSON line per request, to a file) vs LOG_LEVEL=${options.logLevel}`);
  const verbose = await bench.startService('service-log-info', { LOG_LEVEL: 'info', RUN_WORKER: 'false' });
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const rows = await alternate(
    [
      {
        name: `GET /config, LOG_LEVEL=${options.logLevel}`,
        pid: service.pid,
        run: (warmup) => bench.autocannon(service.url, requestOf('config', bindings), duration(warmup)),
      },
      {
        name: 'GET /config, LOG_LEVEL=info',
        pid: verbose.pid,
        run: (warmup) => bench.autocannon(verbose.url, requestOf('config', bindings), duration(warmup)),
      },
      {
        name: `POST /proxy pass-through, LOG_LEVEL=${options.logLevel}`,
        pid: service.pid,
        run: (warmup) => bench.autocannon(service.url, requestOf('proxyFree', bindings), duration(warmup)),
      },
      {
        name: 'POST /proxy pass-through, LOG_LEVEL=info',
        pid: verbose.pid,
        run: (warmup) => bench.autocannon(verbose.url, requestOf('proxyFree', bindings), duration(warmup)),
      },
    ],
    Math.max(1, options.rounds - 1),
  );
  await bench.stopService(verbose);
  rows[1].row.note = `${fmt.pct(rows[1].row.rps / rows[0].row.rps)} of LOG_LEVEL=${options.logLevel}`;
  rows[3].row.note = `${fmt.pct(rows[3].row.rps / rows[2].row.rps)} of LOG_LEVEL=${options.logLevel}`;
  say(table(rows.map((measured) => measured.row)));
  bench.results.logging = rows;
}
