/** Measurement: contenders run in alternation, CPU time per answer, RSS over a run, medians. */
import type { RunResult } from '../autocannon';
import { entryOf } from '../checked';
import { cpuMs, descendantsCpuMs, rssMiB } from '../children';
import { median } from '../stats';
import { progress, type Row } from './output';

export interface Measured {
  row: Row;
  runs: RunResult[];
  /** Medians over the runs of each counter's increase per answer (Contender.counters). */
  counters?: Record<string, number>;
}

export type CpuRun = RunResult & {
  cpuUsPerAnswer?: number;
  dbCpuUsPerAnswer?: number;
  countersPerAnswer?: Record<string, number>;
};

export function summarize(name: string, runs: CpuRun[], expectedStatus = 200): Measured {
  const row: Row = {
    name,
    rps: median(runs.map((run) => run.rps)),
    p50: median(runs.map((run) => run.latency.p50)),
    p99: median(runs.map((run) => run.latency.p99)),
    ...(runs.some((run) => run.cpuUsPerAnswer !== undefined)
      ? { cpuUs: median(runs.map((run) => run.cpuUsPerAnswer ?? NaN)) }
      : {}),
    ...(runs.some((run) => run.dbCpuUsPerAnswer !== undefined)
      ? { dbCpuUs: median(runs.map((run) => run.dbCpuUsPerAnswer ?? NaN)) }
      : {}),
  };
  const unexpected = runs.reduce((sum, run) => sum + notOk(run, expectedStatus), 0);
  if (unexpected > 0) row.note = `${unexpected} answers not ${expectedStatus}!`;
  const names = [...new Set(runs.flatMap((run) => Object.keys(run.countersPerAnswer ?? {})))];
  if (names.length === 0) return { row, runs };
  const counters = Object.fromEntries(
    names.map((name) => [name, median(runs.map((run) => run.countersPerAnswer?.[name] ?? 0))]),
  );
  return { row, runs, counters };
}

export function notOk(run: RunResult, expectedStatus = 200): number {
  let count = run.errors + run.timeouts;
  for (const [status, summary] of Object.entries(run.byStatus))
    if (status !== String(expectedStatus)) count += summary.count;
  return count;
}

export interface Contender {
  name: string;
  /** The server process, whose CPU time per answer is reported. */
  pid?: number;
  /** The process whose descendants are the database (the service that started the embedded Postgres). */
  dbParentPid?: number;
  expectedStatus?: number;
  run: (warmup: boolean) => Promise<RunResult>;
  /** Counters read before and after each measured run, outside its CPU window; their increase per answer is kept. */
  counters?: () => Promise<Record<string, number>>;
}

/**
 * Runs each contender once per round, the order reversed every other round, after one warm-up
 * each; returns the rows in the contenders' order.
 */
export async function alternate<const C extends readonly Contender[]>(
  contenders: C,
  rounds: number,
): Promise<{ -readonly [K in keyof C]: Measured }> {
  const results = new Map<string, CpuRun[]>(contenders.map((contender) => [contender.name, []]));
  for (const contender of contenders) {
    progress(`warm-up: ${contender.name}`);
    await contender.run(true);
  }
  for (let round = 0; round < rounds; round += 1) {
    for (const contender of round % 2 === 0 ? contenders : [...contenders].reverse()) {
      progress(`round ${round + 1}/${rounds}: ${contender.name}`);
      const countersBefore = await contender.counters?.();
      const before = contender.pid === undefined ? undefined : cpuMs(contender.pid);
      const dbBefore = contender.dbParentPid === undefined ? undefined : descendantsCpuMs(contender.dbParentPid);
      const result = await contender.run(false);
      const after = contender.pid === undefined ? undefined : cpuMs(contender.pid);
      const dbAfter = contender.dbParentPid === undefined ? undefined : descendantsCpuMs(contender.dbParentPid);
      const countersAfter = await contender.counters?.();
      const perAnswer = (from: number | undefined, to: number | undefined) =>
        from === undefined || to === undefined || result.responses === 0
          ? undefined
          : ((to - from) * 1000) / result.responses;
      const cpuUsPerAnswer = perAnswer(before, after);
      const dbCpuUsPerAnswer = perAnswer(dbBefore, dbAfter);
      const countersPerAnswer =
        countersBefore === undefined || countersAfter === undefined || result.responses === 0
          ? undefined
          : Object.fromEntries(
              Object.entries(countersAfter).map(([name, value]) => [
                name,
                (value - (countersBefore[name] ?? 0)) / result.responses,
              ]),
            );
      entryOf(results, contender.name, 'alternate').push({
        ...result,
        ...(cpuUsPerAnswer === undefined ? {} : { cpuUsPerAnswer }),
        ...(dbCpuUsPerAnswer === undefined ? {} : { dbCpuUsPerAnswer }),
        ...(countersPerAnswer === undefined ? {} : { countersPerAnswer }),
      });
    }
  }
  // One row per contender, in their order: as many rows as contenders.
  return contenders.map((contender) =>
    summarize(contender.name, entryOf(results, contender.name, 'alternate'), contender.expectedStatus),
  ) as { -readonly [K in keyof C]: Measured };
}

/** Runs a load and adds the CPU time the server process spent per answer. */
export async function withCpu<T extends RunResult>(
  pid: number,
  load: () => Promise<T>,
): Promise<T & { cpuUsPerAnswer?: number }> {
  const before = cpuMs(pid);
  const result = await load();
  const after = cpuMs(pid);
  if (before === undefined || after === undefined || result.responses === 0) return result;
  return { ...result, cpuUsPerAnswer: ((after - before) * 1000) / result.responses };
}

/** RSS of a process, sampled until `during` settles. */
export async function sampleRss(
  pid: number,
  during: Promise<unknown>,
  everyMs = 100,
): Promise<{ maxMiB: number; samples: number[] }> {
  const samples: number[] = [];
  // Cleared by the callback below (a property: TypeScript would narrow a local flag to `true`).
  const state = { running: true };
  const settled = during.then(
    () => undefined,
    () => undefined,
  );
  void settled.then(() => {
    state.running = false;
  });
  while (state.running) {
    const rss = rssMiB(pid);
    if (rss !== undefined) samples.push(rss);
    await Promise.race([new Promise((resolve) => setTimeout(resolve, everyMs)), settled]);
  }
  return { maxMiB: Math.max(...samples), samples };
}
