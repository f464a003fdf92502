/**
 * Paid call: x402-fetch straight to the paid target against paid POST /proxy to it, with where the
 * time goes; and in the same run, paid POST /proxy to the same route served by @x402/express 2.27
 * (x402 version 2: PAYMENT-REQUIRED read, PAYMENT-SIGNATURE sent), with its ratio to version 1.
 */
import { defined, itemAt } from '../../checked';
import type { PaidResult } from '../../loadgen';
import type { ServiceChild } from '../../serviceChild';
import { median } from '../../stats';
import { alternate, type Measured } from '../measure';
import { fmt, say, table } from '../output';
import { BASE_SEPOLIA_CHAIN_ID, type Bench } from '../setup';

/** A difference in ms with its sign. */
const signed = (ms: number) => `${ms >= 0 ? '+' : ''}${fmt.ms(ms)}`;

export type PaidRun = PaidResult & { phases: { toTarget: number[]; toPaidRequest: number[]; toAnswer: number[] } };

export async function paid(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings, peers } = bench;
  say();
  say(
    `## Paid call: x402-fetch straight to the paid target vs paid POST /proxy to it, and to a version 2 target (one call at a time, ${options.paidCalls} calls per run)`,
  );
  // Each call reaches the target twice (unpaid, then paid): the target's arrival times split a
  // call in three: until the target is first called, from its 402 to the paid request, and from
  // the paid request to the answer.
  const run = async (mode: 'direct' | 'proxy', count: number, target: 'v1' | 'v2' = 'v1'): Promise<PaidRun> => {
    await bench.peersChild.call('reset');
    const result = await bench.loadgen.call<PaidResult>(
      'paid',
      {
        run: {
          mode,
          url: service.url,
          targetUrl:
            target === 'v2' ? defined(peers.v2Routes.paid, 'the paid route of the v2 target') : bindings.paidUrl,
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
    const arrivals = await bench.peersChild.call<Array<{ route: string; paid: boolean; receivedAtMs: number }>>(
      'requests',
      { last: 2 * count, target },
    );
    const phases = { toTarget: [] as number[], toPaidRequest: [] as number[], toAnswer: [] as number[] };
    if (arrivals.length === 2 * result.calls.length) {
      result.calls.forEach(([start, end], index) => {
        const [unpaid, paidRequest] = [
          itemAt(arrivals, 2 * index, 'arrivals'),
          itemAt(arrivals, 2 * index + 1, 'arrivals'),
        ];
        if (unpaid.paid || !paidRequest.paid) return;
        phases.toTarget.push(unpaid.receivedAtMs - start);
        phases.toPaidRequest.push(paidRequest.receivedAtMs - unpaid.receivedAtMs);
        phases.toAnswer.push(end - paidRequest.receivedAtMs);
      });
    }
    return { ...result, phases };
  };
  const count = (warmup: boolean) => (warmup ? 5 : options.paidCalls);
  const rows = await alternate(
    [
      { name: 'x402-fetch -> paid target (direct)', run: (warmup) => run('direct', count(warmup)) },
      {
        name: 'POST /proxy -> paid target',
        pid: service.pid,
        ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}),
        run: (warmup) => run('proxy', count(warmup)),
      },
      {
        name: 'POST /proxy -> paid v2 target',
        pid: service.pid,
        ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}),
        run: (warmup) => run('proxy', count(warmup), 'v2'),
      },
    ],
    options.rounds,
  );
  for (const measured of rows) {
    const failure = (measured.runs as PaidRun[]).flatMap((result) => result.failures)[0];
    if (failure) measured.row.note = `${measured.row.note ?? ''} first: ${failure}`.trim();
  }
  const delta = rows[1].row.p50 - rows[0].row.p50;
  rows[1].row.note = `+${fmt.ms(delta)} ms p50 over the direct call ${rows[1].row.note ?? ''}`.trim();
  const v2Ratio = rows[2].row.p50 / rows[1].row.p50;
  rows[2].row.note = `${v2Ratio.toFixed(2)}x the p50 of /proxy to the v1 target ${rows[2].row.note ?? ''}`.trim();
  say(table(rows.map((measured) => measured.row)));
  const phase = (measured: Measured, name: keyof PaidRun['phases']) =>
    median((measured.runs as PaidRun[]).flatMap((result) => result.phases[name]));
  const [direct, proxied, proxiedV2] = rows;
  say("  Where the time goes (medians over every call, from the target's arrival times; ms):");
  say(
    `    ${''.padEnd(30)} ${'to the target'.padStart(14)} ${'402 -> paid call'.padStart(17)} ${'paid call -> answer'.padStart(20)}`,
  );
  for (const [name, measured] of [
    ['x402-fetch (direct)', direct],
    ['POST /proxy', proxied],
    ['POST /proxy (v2 target)', proxiedV2],
  ] as const) {
    say(
      `    ${name.padEnd(30)} ${fmt.ms(phase(measured, 'toTarget')).padStart(14)} ${fmt.ms(phase(measured, 'toPaidRequest')).padStart(17)} ${fmt.ms(phase(measured, 'toAnswer')).padStart(20)}`,
    );
  }
  say(
    `    /proxy adds ${fmt.ms(phase(proxied, 'toTarget') - phase(direct, 'toTarget'))} ms before the target is called (request in, key, validation, the SSRF check), ` +
      `${fmt.ms(phase(proxied, 'toPaidRequest') - phase(direct, 'toPaidRequest'))} ms between the 402 and the paid request (credits reserved, signing, the row marked signed), ` +
      `${fmt.ms(phase(proxied, 'toAnswer') - phase(direct, 'toAnswer'))} ms after the paid request (the chain read back, credits charged).`,
  );
  say(
    `    To the v2 target, against the v1 target: ${signed(phase(proxiedV2, 'toPaidRequest') - phase(proxied, 'toPaidRequest'))} ms between the 402 and the paid request ` +
      `(reading PAYMENT-REQUIRED, building PAYMENT-SIGNATURE: ours), ${signed(phase(proxiedV2, 'toAnswer') - phase(proxied, 'toAnswer'))} ms after it ` +
      `(mostly the target's: its verification and settlement through its own facilitator).`,
  );

  bench.goals.push({
    goal: 'paid /proxy adds <= 10 ms p50 over the direct call',
    figure: `+${fmt.ms(delta)} ms (${fmt.ms(rows[1].row.p50)} vs ${fmt.ms(rows[0].row.p50)} ms)`,
    met: delta <= 10,
  });
  // The p50 of the whole call decides; the service's CPU per call and the 402 -> paid call phase
  // (reading PAYMENT-REQUIRED, signing, building PAYMENT-SIGNATURE) show our own share of it.
  const ourShareV2 = phase(proxiedV2, 'toPaidRequest') - phase(proxied, 'toPaidRequest');
  const cpu = (row: { cpuUs?: number }) => (row.cpuUs === undefined ? '-' : fmt.ms(row.cpuUs));
  bench.goals.push({
    goal: 'paid /proxy to a v2 target costs no more than to a v1 target (p50)',
    figure:
      `${v2Ratio.toFixed(2)}x (${fmt.ms(rows[2].row.p50)} vs ${fmt.ms(rows[1].row.p50)} ms); ` +
      `service CPU ${cpu(rows[2].row)} vs ${cpu(rows[1].row)} us/call; 402 -> paid call ${signed(ourShareV2)} ms`,
    met: v2Ratio <= 1,
  });
  bench.results.paid = rows;
}
