/** What the bench prints: its lines, progress, figures and tables, and the goals it checks. */
export const SERVER_CORE = 0;
export const LOAD_CORE = 1;

export function say(text = ''): void {
  process.stdout.write(`${text}\n`);
}

export function progress(text: string): void {
  process.stderr.write(`  .. ${text}\n`);
}

export const fmt = {
  rps: (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '-'),
  ms: (value: number) =>
    Number.isFinite(value)
      ? value >= 100
        ? value.toFixed(0)
        : value >= 10
          ? value.toFixed(1)
          : value.toFixed(2)
      : '-',
  pct: (value: number) => (Number.isFinite(value) ? `${(value * 100).toFixed(0)}%` : '-'),
};

export interface Row {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  /** CPU time of the server process per answer, in microseconds (robust to other load on the core). */
  cpuUs?: number;
  /** CPU time of the service's embedded Postgres per answer, in microseconds. */
  dbCpuUs?: number;
  note?: string;
}

export function table(rows: Row[]): string {
  const width = Math.max(...rows.map((row) => row.name.length), 10);
  const cpu = rows.some((row) => row.cpuUs !== undefined);
  const db = rows.some((row) => row.dbCpuUs !== undefined);
  const micro = (value: number | undefined, width: number) =>
    (value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(0)).padStart(width);
  const header =
    `  ${'scenario'.padEnd(width)}  ${'req/s'.padStart(8)}  ${'p50 ms'.padStart(7)}  ${'p99 ms'.padStart(7)}` +
    (cpu ? `  ${'CPU us/req'.padStart(10)}` : '') +
    (db ? `  ${'DB us/req'.padStart(9)}` : '') +
    '  notes';
  const lines = rows.map(
    (row) =>
      `  ${row.name.padEnd(width)}  ${fmt.rps(row.rps).padStart(8)}  ${fmt.ms(row.p50).padStart(7)}  ${fmt.ms(row.p99).padStart(7)}` +
      (cpu ? `  ${micro(row.cpuUs, 10)}` : '') +
      (db ? `  ${micro(row.dbCpuUs, 9)}` : '') +
      `  ${row.note ?? ''}`,
  );
  return [header, `  ${'-'.repeat(header.length - 2)}`, ...lines].join('\n');
}

export interface Goal {
  goal: string;
  figure: string;
  met: boolean;
  /** The measured cost in microseconds (CPU or added time per call, CPU per verification), compared with its floor. */
  measuredUs?: number;
  /** Set by the floor section of the same run: whether the measured cost is within twice its paced floor. */
  floor?: { pacedUs: number; withinTwice: boolean };
}

/** A goal's line in the Goals list: MET, or SHORT and whether it is within twice its paced floor of the same run. */
export function goalLine(goal: Goal): string {
  if (goal.met) return `  MET    ${goal.goal}: ${goal.figure}`;
  // A goal with no cost of its own (a comparison between two contenders) has no floor to be held to.
  if (goal.measuredUs === undefined && !goal.floor) return `  SHORT  ${goal.goal}: ${goal.figure}`;
  const floor = goal.floor
    ? goal.floor.withinTwice
      ? `within twice its paced floor (${fmt.ms((goal.measuredUs ?? NaN) / 1000)} <= 2 x ${fmt.ms(goal.floor.pacedUs / 1000)} ms)`
      : `NOT within twice its paced floor (${fmt.ms((goal.measuredUs ?? NaN) / 1000)} > 2 x ${fmt.ms(goal.floor.pacedUs / 1000)} ms)`
    : 'its floor was not measured in this run (add floor to --only)';
  return `  SHORT  ${goal.goal}: ${goal.figure}\n           -> ${floor}`;
}
