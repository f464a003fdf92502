/** GET /config against plain express 5 answering the same JSON. */
import { announcedUrl, spawnChild } from '../../children';
import { requestOf } from '../../scenarios';
import type { ServiceChild } from '../../serviceChild';
import { alternate } from '../measure';
import { fmt, say, SERVER_CORE, table } from '../output';
import type { Bench } from '../setup';

export async function config(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  say();
  say(`## GET /config vs plain express 5 answering the same JSON (${options.connections} connections)`);
  const body = await (await fetch(`${service.url}/config`)).text();
  const plainExpress = await spawnChild({
    name: 'plain-express',
    core: SERVER_CORE,
    script: 'load/runner/plainExpress.ts',
    ipc: true,
    env: { BENCH_CONFIG_BODY: body },
  });
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const rows = await alternate(
    [
      {
        name: 'plain express 5, same JSON',
        pid: plainExpress.pid,
        run: (warmup) => bench.autocannon(announcedUrl(plainExpress), requestOf('config', bindings), duration(warmup)),
      },
      {
        name: 'GET /config',
        pid: service.pid,
        run: (warmup) => bench.autocannon(service.url, requestOf('config', bindings), duration(warmup)),
      },
    ],
    options.rounds,
  );
  await plainExpress.stop();
  rows[1].row.note = `${fmt.pct(rows[1].row.rps / rows[0].row.rps)} of plain express ${rows[1].row.note ?? ''}`.trim();
  say(table(rows.map((measured) => measured.row)));
  bench.results.config = rows;
}
