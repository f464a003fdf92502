/**
 * Paid call: x402-fetch straight to the paid target against paid POST /proxy to it, with where the
 * time goes; in the same run, paid POST /proxy to the same route served by @x402/express 2.27
 * (x402 version 2: PAYMENT-REQUIRED read, PAYMENT-SIGNATURE sent), with its ratio to version 1;
 * and the same x402-fetch client paying POST /relay for the same target, against the direct call
 * plus the client's own settlement (a fresh authorization settled by POST /settle on the
 * facilitator the service uses), with where its time goes.
 */
import { defined, itemAt } from '../../checked';
import { cpuMs, descendantsCpuMs } from '../../children';
import type { PaidResult } from '../../loadgen';
import type { ServiceChild } from '../../serviceChild';
import { median } from '../../stats';
import { alternate, type Measured } from '../measure';
import { fmt, progress, say, table, type Row } from '../output';
import { BASE_SEPOLIA_CHAIN_ID, type Bench } from '../setup';

/** A difference in ms with its sign. */
const signed = (ms: number) => `${ms >= 0 ? '+' : ''}${fmt.ms(ms)}`;

/** Calls of each contender before the measured rounds: enough for the paid paths to be compiled. */
export const PAID_WARMUP_CALLS = 300;

/** The paid routes the goals name. */
export type PaidRoute = '/proxy' | '/relay';

/** Service CPU and Postgres CPU budgets of one paid call by route (issue 27), in microseconds. */
export const PAID_CPU_BUDGET_US: Record<PaidRoute, number> = { '/proxy': 3_000, '/relay': 8_000 };
export const PAID_DB_CPU_BUDGET_US: Record<PaidRoute, number> = { '/proxy': 1_000, '/relay': 3_000 };

export type PaidRun = PaidResult & {
  phases: { toTarget: number[]; toPaidRequest: number[]; toAnswer: number[] };
  /** Paid /relay only: the target is asked three times (our 402, again with the payment, then paid). */
  relayPhases?: { toTarget: number[]; toSecondAsk: number[]; toPaidRequest: number[]; toAnswer: number[] };
};

export type Arrival = { route: string; paid: boolean; receivedAtMs: number };

/** The split of each call by the target's arrival times: two per call (unpaid, paid), three for /relay. */
export function phasesOf(result: PaidResult, arrivals: Arrival[], perCall: 2 | 3): Omit<PaidRun, keyof PaidResult> {
  const phases = { toTarget: [] as number[], toPaidRequest: [] as number[], toAnswer: [] as number[] };
  if (arrivals.length !== perCall * result.calls.length) return { phases };
  const at = (index: number) => itemAt(arrivals, index, 'arrivals');
  if (perCall === 2) {
    result.calls.forEach(([start, end], index) => {
      const [unpaid, paidRequest] = [at(2 * index), at(2 * index + 1)];
      if (unpaid.paid || !paidRequest.paid) return;
      phases.toTarget.push(unpaid.receivedAtMs - start);
      phases.toPaidRequest.push(paidRequest.receivedAtMs - unpaid.receivedAtMs);
      phases.toAnswer.push(end - paidRequest.receivedAtMs);
    });
    return { phases };
  }
  const relayPhases = {
    toTarget: [] as number[],
    toSecondAsk: [] as number[],
    toPaidRequest: [] as number[],
    toAnswer: [] as number[],
  };
  result.calls.forEach(([start, end], index) => {
    const [first, second, paidRequest] = [at(3 * index), at(3 * index + 1), at(3 * index + 2)];
    if (first.paid || second.paid || !paidRequest.paid) return;
    relayPhases.toTarget.push(first.receivedAtMs - start);
    relayPhases.toSecondAsk.push(second.receivedAtMs - first.receivedAtMs);
    relayPhases.toPaidRequest.push(paidRequest.receivedAtMs - second.receivedAtMs);
    relayPhases.toAnswer.push(end - paidRequest.receivedAtMs);
  });
  return { phases, relayPhases };
}

/** The latency each paid route may add, in ms, and its goal line (the floor section finds it by name). */
export const ADDED_BUDGET_MS = { proxy: 4, relay: 15 } as const;
export const ADDED_GOALS = {
  proxy: `paid /proxy adds <= ${ADDED_BUDGET_MS.proxy} ms p50 over the direct x402-fetch call`,
  relay: `paid /relay adds <= ${ADDED_BUDGET_MS.relay} ms p50 on top of the client's own settlement`,
} as const;

/** The goal line of a paid route's CPU per call, the service's or its Postgres's (the floor section finds it by name). */
export function cpuGoalName(route: PaidRoute, whose: 'service' | 'postgres'): string {
  return whose === 'service'
    ? `paid ${route} costs <= ${PAID_CPU_BUDGET_US[route] / 1000} ms of service CPU per call`
    : `paid ${route} costs <= ${PAID_DB_CPU_BUDGET_US[route] / 1000} ms of Postgres CPU per call`;
}

/** Goal lines of one paid route's CPU per call: the service's and its Postgres's. */
export function cpuGoals(bench: Bench, route: PaidRoute, row: Row): void {
  const us = (value: number | undefined) =>
    value === undefined || !Number.isFinite(value) ? 'not measured' : `${fmt.ms(value / 1000)} ms`;
  bench.goals.push({
    goal: cpuGoalName(route, 'service'),
    figure: `${us(row.cpuUs)} per call (at most ${row.cpuUs ? fmt.rps(1e6 / row.cpuUs) : '-'} paid calls/s on one core)`,
    met: row.cpuUs !== undefined && row.cpuUs <= PAID_CPU_BUDGET_US[route],
    ...(row.cpuUs === undefined ? {} : { measuredUs: row.cpuUs }),
  });
  bench.goals.push({
    goal: cpuGoalName(route, 'postgres'),
    figure: bench.embeddedDatabase
      ? `${us(row.dbCpuUs)} per call`
      : "not measured: DATABASE_URL's server is not a child of the bench",
    met: row.dbCpuUs !== undefined && row.dbCpuUs <= PAID_DB_CPU_BUDGET_US[route],
    ...(row.dbCpuUs === undefined ? {} : { measuredUs: row.dbCpuUs }),
  });
}

/** The service's JSON-RPC calls so far by method (its /metrics), and their total. */
async function rpcCalls(serviceUrl: string): Promise<Record<string, number>> {
  const response = await fetch(new URL('/metrics', serviceUrl));
  const text = await response.text();
  const calls: Record<string, number> = { total: 0 };
  for (const match of text.matchAll(/^prs_rpc_request_duration_seconds_count\{([^}]*)\} ([0-9.e+]+)$/gm)) {
    const method = /method="([^"]*)"/.exec(match[1] ?? '')?.[1] ?? '?';
    const count = Number(match[2]);
    calls[method] = (calls[method] ?? 0) + count;
    calls.total = (calls.total ?? 0) + count;
  }
  return calls;
}

/** JSON-RPC calls per paid call: the total and by method, most first. */
function rpcLine(measured: Measured): string {
  const counters = measured.counters;
  if (!counters) return '-';
  const methods = Object.entries(counters)
    .filter(([name, value]) => name !== 'total' && value >= 0.05)
    .sort((a, b) => b[1] - a[1])
    .map(([name, value]) => `${value.toFixed(1)} ${name}`)
    .join(', ');
  return `${(counters.total ?? 0).toFixed(1)}${methods ? ` (${methods})` : ''}`;
}

/** CPU the service (and its embedded Postgres) use a second with nothing to do, over a few seconds. */
async function idleCpu(
  bench: Bench,
  service: ServiceChild,
): Promise<{ serviceMsPerS: number; dbMsPerS?: number } | undefined> {
  progress('idle CPU of the service');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const seconds = 3;
  const before = cpuMs(service.pid);
  const dbBefore = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const after = cpuMs(service.pid);
  const dbAfter = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
  if (before === undefined || after === undefined) return undefined;
  return {
    serviceMsPerS: (after - before) / seconds,
    ...(dbBefore === undefined || dbAfter === undefined ? {} : { dbMsPerS: (dbAfter - dbBefore) / seconds }),
  };
}

export async function paid(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings, peers } = bench;
  say();
  say(
    `## Paid call: x402-fetch straight to the paid target vs paid POST /proxy to it, and to a version 2 target; x402-fetch paying POST /relay for it, and the client's own settlement (one call at a time, ${options.paidCalls} calls per run)`,
  );
  // Each call reaches the target twice (unpaid, then paid): the target's arrival times split a
  // call in three: until the target is first called, from its 402 to the paid request, and from
  // the paid request to the answer. A /relay call reaches it three times (the 402 we answer is
  // priced by asking the target; the call with the payment asks it again before paying it).
  const run = async (
    mode: 'direct' | 'proxy' | 'relay' | 'settle',
    count: number,
    target: 'v1' | 'v2' = 'v1',
  ): Promise<PaidRun> => {
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
          facilitatorUrl: peers.facilitatorUrl,
          count,
          concurrency: 1,
        },
      },
      600_000,
    );
    if (mode === 'settle') return { ...result, phases: { toTarget: [], toPaidRequest: [], toAnswer: [] } };
    const perCall = mode === 'relay' ? 3 : 2;
    const arrivals = await bench.peersChild.call<Arrival[]>('requests', { last: perCall * count, target });
    return { ...result, ...phasesOf(result, arrivals, perCall) };
  };
  // The warm-up runs each paid path until V8 has compiled it (and the peers theirs): a paid call
  // runs some 500 functions hot enough to be optimised, and after 5 calls (or 100) a fifth of the
  // service's CPU still went to optimising them and most of the rest ran unoptimised: the cost of
  // a process just started, not of a paid call.
  const count = (warmup: boolean) => (warmup ? PAID_WARMUP_CALLS : options.paidCalls);
  const ofService = {
    pid: service.pid,
    ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}),
    counters: () => rpcCalls(service.url),
  };
  const rows = await alternate(
    [
      { name: 'x402-fetch -> paid target (direct)', run: (warmup) => run('direct', count(warmup)) },
      { name: 'POST /proxy -> paid target', ...ofService, run: (warmup) => run('proxy', count(warmup)) },
      { name: 'POST /proxy -> paid v2 target', ...ofService, run: (warmup) => run('proxy', count(warmup), 'v2') },
      { name: 'x402-fetch -> POST /relay -> paid target', ...ofService, run: (warmup) => run('relay', count(warmup)) },
      {
        name: "the client's settlement alone (POST /settle)",
        run: (warmup) => run('settle', count(warmup)),
      },
    ],
    options.rounds,
  );
  // After the runs: the service is warm, and what the calls left to its jobs is done.
  const idle = await idleCpu(bench, service);
  for (const measured of rows) {
    const failure = (measured.runs as PaidRun[]).flatMap((result) => result.failures)[0];
    if (failure) measured.row.note = `${measured.row.note ?? ''} first: ${failure}`.trim();
  }
  const [direct, proxied, proxiedV2, relayed, settlement] = rows;
  const delta = proxied.row.p50 - direct.row.p50;
  proxied.row.note = `${signed(delta)} ms p50 over the direct call ${proxied.row.note ?? ''}`.trim();
  const v2Ratio = proxiedV2.row.p50 / proxied.row.p50;
  proxiedV2.row.note = `${v2Ratio.toFixed(2)}x the p50 of /proxy to the v1 target ${proxiedV2.row.note ?? ''}`.trim();
  // The client's own settlement: what paying us costs it at the least, on top of the direct call.
  const relayAdded = relayed.row.p50 - (direct.row.p50 + settlement.row.p50);
  relayed.row.note = `${signed(relayAdded)} ms p50 over direct + settlement ${relayed.row.note ?? ''}`.trim();
  settlement.row.note =
    `a fresh authorization of the client for the relay's 402, settled by the facilitator (signed before the clock starts) ${settlement.row.note ?? ''}`.trim();
  say(table(rows.map((measured) => measured.row)));
  const phase = (measured: Measured, name: keyof PaidRun['phases']) =>
    median((measured.runs as PaidRun[]).flatMap((result) => result.phases[name]));
  const relayPhase = (name: keyof NonNullable<PaidRun['relayPhases']>) =>
    median((relayed.runs as PaidRun[]).flatMap((result) => result.relayPhases?.[name] ?? []));
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
  say(
    `    POST /relay: ${fmt.ms(relayPhase('toTarget'))} ms to the target (asked for its price), ${fmt.ms(relayPhase('toSecondAsk'))} ms from there to the call with X-PAYMENT asking it again ` +
      `(our 402 out, the client signing, the request in, decoding), ${fmt.ms(relayPhase('toPaidRequest'))} ms from there to the paid request ` +
      `(verification, admission, the client's settlement: ${fmt.ms(settlement.row.p50)} ms of it on its own, our signature, the row), ${fmt.ms(relayPhase('toAnswer'))} ms after it ` +
      `(the target's settlement, the chain read back, the row delivered; the direct call spends ${fmt.ms(phase(direct, 'toAnswer'))} ms there).`,
  );
  say(
    `    Paid /relay p50 ${fmt.ms(relayed.row.p50)} ms = the direct call ${fmt.ms(direct.row.p50)} + the client's settlement ${fmt.ms(settlement.row.p50)} + ${signed(relayAdded)} ms added by the relay.`,
  );
  say(
    `    JSON-RPC calls of the service per paid call (its /metrics): /proxy ${rpcLine(proxied)}; /proxy to the v2 target ${rpcLine(proxiedV2)}; /relay ${rpcLine(relayed)}.`,
  );
  if (idle) {
    // Timers, the worker's polling, the liveness heartbeat: charged to every call by the CPU columns.
    const idlePerCall = (rate: number, row: Row) => fmt.rps((rate * 1000) / row.rps);
    say(
      `    Idle, the service uses ${fmt.ms(idle.serviceMsPerS)} ms of CPU a second${idle.dbMsPerS === undefined ? '' : ` and its Postgres ${fmt.ms(idle.dbMsPerS)} ms`}: ` +
        `at these paces ${idlePerCall(idle.serviceMsPerS, proxied.row)} us of each /proxy call's service CPU and ${idlePerCall(idle.serviceMsPerS, relayed.row)} us of each /relay call's` +
        (idle.dbMsPerS === undefined
          ? ''
          : ` (Postgres: ${idlePerCall(idle.dbMsPerS, proxied.row)} and ${idlePerCall(idle.dbMsPerS, relayed.row)} us)`) +
        ' are that idle work.',
    );
  }

  bench.goals.push({
    goal: ADDED_GOALS.proxy,
    figure: `${signed(delta)} ms (${fmt.ms(proxied.row.p50)} vs ${fmt.ms(direct.row.p50)} ms)`,
    met: delta <= ADDED_BUDGET_MS.proxy,
    measuredUs: delta * 1000,
  });
  cpuGoals(bench, '/proxy', proxied.row);
  bench.goals.push({
    goal: ADDED_GOALS.relay,
    figure:
      `${signed(relayAdded)} ms: /relay ${fmt.ms(relayed.row.p50)} ms - (direct ${fmt.ms(direct.row.p50)} ms + ` +
      `settlement ${fmt.ms(settlement.row.p50)} ms, POST /settle on the facilitator)`,
    met: relayAdded <= ADDED_BUDGET_MS.relay,
    measuredUs: relayAdded * 1000,
  });
  cpuGoals(bench, '/relay', relayed.row);
  // The p50 of the whole call decides; the service's CPU per call and the 402 -> paid call phase
  // (reading PAYMENT-REQUIRED, signing, building PAYMENT-SIGNATURE) show our own share of it.
  const ourShareV2 = phase(proxiedV2, 'toPaidRequest') - phase(proxied, 'toPaidRequest');
  const cpu = (row: { cpuUs?: number }) => (row.cpuUs === undefined ? '-' : fmt.rps(row.cpuUs));
  bench.goals.push({
    goal: 'paid /proxy to a v2 target costs no more than to a v1 target (p50)',
    figure:
      `${v2Ratio.toFixed(2)}x (${fmt.ms(proxiedV2.row.p50)} vs ${fmt.ms(proxied.row.p50)} ms); ` +
      `service CPU ${cpu(proxiedV2.row)} vs ${cpu(proxied.row)} us/call; 402 -> paid call ${signed(ourShareV2)} ms`,
    met: v2Ratio <= 1,
  });
  bench.results.paid = rows;
  bench.results.paidIdle = idle;
}
