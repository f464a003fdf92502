/**
 * `npm run bench`: the long form of the load runner. Everything runs on 127.0.0.1 in child
 * processes: the local peers (chain, facilitator, x402 target), the service (`server/main.ts`,
 * configured by environment only), a bare Node forwarder and a plain express app, all pinned to
 * core 0; the load generator (autocannon, node:http clients, x402-fetch) pinned to core 1. The
 * contenders of each comparison alternate runs; medians are reported.
 *
 *   npm run bench                          everything but the profiles (about 5 minutes)
 *   npm run bench -- --quick               shorter runs, fewer rounds, no soak
 *   npm run bench -- --only pass,config    only these sections: pass, config, paid, logging, soak,
 *                                          caps, rss, profile (profile: CPU profiles of the service)
 *   options: --rounds N --duration S --connections N --paid-calls N --overload-cap N --soak S
 *            --log-level L --node-flags "FLAGS" (for the service) --no-pin --keep --json FILE
 *
 * Database: DATABASE_URL when set (a throwaway database is created on that server and dropped),
 * else the service's embedded Postgres in a throwaway DATA_DIR under .tmp/.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createDb } from '../../db/index';
import { pruneStaleClusters } from '../../db/embedded';
import { createApiKey, createOrganisation } from '../../payments/accounts';
import { grantCredits } from '../../payments/credits';
import { holdRequest, type HeldRequest } from '../../test/support/heldRequest';
import type { AutocannonRun, LoadRequest, RunResult } from './autocannon';
import { runCapsScenario, runDisconnectScenario, type CapsReport, type LoadResult } from './caps';
import { cpuMs, descendantsCpuMs, disablePinning, pinningAvailable, ROOT, rssMiB, spawnChild, stopAllChildren, type Child } from './children';
import { formatProfile, summarizeProfile } from './profile';
import { requestOf, scenarios, UNKNOWN_WEBHOOK_ID, type Bindings, type CapGroup, type RequestName } from './scenarios';
import type { PaidResult } from './loadgen';
import { startServiceChild, type ServiceChild } from './serviceChild';
import { median, type LatencySummary } from './stats';

// ---------------------------------------------------------------------------------------------
// Options

const SECTIONS = ['pass', 'config', 'paid', 'logging', 'soak', 'caps', 'rss', 'profile'] as const;
type Section = (typeof SECTIONS)[number];

interface Options {
  rounds: number;
  durationS: number;
  warmupS: number;
  connections: number;
  paidCalls: number;
  overloadCap: number;
  soakS: number;
  logLevel: string;
  keep: boolean;
  json: string | undefined;
  sections: Set<Section>;
  /** Extra node flags for every service process (e.g. --max-semi-space-size=4). */
  nodeFlags: string[];
}

function parseOptions(argv: string[]): Options {
  const quick = argv.includes('--quick');
  const options: Options = {
    rounds: quick ? 2 : 3,
    durationS: quick ? 3 : 5,
    warmupS: quick ? 1 : 2,
    connections: 50,
    paidCalls: quick ? 25 : 60,
    overloadCap: 20,
    soakS: quick ? 0 : 30,
    logLevel: 'warn',
    keep: false,
    json: undefined,
    nodeFlags: [],
    sections: new Set(SECTIONS.filter((section) => section !== 'profile' && !(quick && section === 'logging'))),
  };
  const number = (index: number, name: string, min: number) => {
    const value = Number(argv[index + 1]);
    if (!Number.isFinite(value) || value < min) throw new Error(`${name} takes a number of at least ${min}`);
    return value;
  };
  for (let index = 0; index < argv.length; index += 1) {
    const option = argv[index]!;
    switch (option) {
      case '--quick':
        break;
      case '--rounds':
        options.rounds = number(index++, option, 1);
        break;
      case '--duration':
        options.durationS = number(index++, option, 1);
        break;
      case '--connections':
        options.connections = number(index++, option, 1);
        break;
      case '--paid-calls':
        options.paidCalls = number(index++, option, 1);
        break;
      case '--overload-cap':
        options.overloadCap = number(index++, option, 1);
        break;
      case '--soak':
        options.soakS = number(index++, option, 0);
        break;
      case '--log-level':
        options.logLevel = argv[++index] ?? 'warn';
        break;
      case '--profile':
        options.sections.add('profile');
        break;
      case '--only': {
        const wanted = (argv[++index] ?? '').split(',').filter(Boolean);
        if (wanted.length === 0 || wanted.some((section) => !(SECTIONS as readonly string[]).includes(section))) {
          throw new Error(`--only takes a comma list of ${SECTIONS.join(', ')}`);
        }
        options.sections = new Set(wanted as Section[]);
        break;
      }
      case '--node-flags':
        options.nodeFlags = (argv[++index] ?? '').split(' ').filter(Boolean);
        break;
      case '--no-pin':
        disablePinning();
        break;
      case '--keep':
        options.keep = true;
        break;
      case '--json':
        options.json = argv[++index];
        break;
      default:
        throw new Error(`unknown option ${option} (see the top of load/runner/bench.ts)`);
    }
  }
  if (options.soakS === 0) options.sections.delete('soak');
  return options;
}

// ---------------------------------------------------------------------------------------------
// Output

const SERVER_CORE = 0;
const LOAD_CORE = 1;

function say(text = ''): void {
  process.stdout.write(`${text}\n`);
}

function progress(text: string): void {
  process.stderr.write(`  .. ${text}\n`);
}

const fmt = {
  rps: (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : '-'),
  ms: (value: number) => (Number.isFinite(value) ? (value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2)) : '-'),
  pct: (value: number) => (Number.isFinite(value) ? `${(value * 100).toFixed(0)}%` : '-'),
};

interface Row {
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

function table(rows: Row[]): string {
  const width = Math.max(...rows.map((row) => row.name.length), 10);
  const cpu = rows.some((row) => row.cpuUs !== undefined);
  const db = rows.some((row) => row.dbCpuUs !== undefined);
  const micro = (value: number | undefined, width: number) => (value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(0)).padStart(width);
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

interface Goal {
  goal: string;
  figure: string;
  met: boolean;
}

// ---------------------------------------------------------------------------------------------
// Measurement helpers

interface Measured {
  row: Row;
  runs: RunResult[];
}

type CpuRun = RunResult & { cpuUsPerAnswer?: number; dbCpuUsPerAnswer?: number };

function summarize(name: string, runs: CpuRun[], expectedStatus = 200): Measured {
  const row: Row = {
    name,
    rps: median(runs.map((run) => run.rps)),
    p50: median(runs.map((run) => run.latency.p50)),
    p99: median(runs.map((run) => run.latency.p99)),
    ...(runs.some((run) => run.cpuUsPerAnswer !== undefined) ? { cpuUs: median(runs.map((run) => run.cpuUsPerAnswer ?? NaN)) } : {}),
    ...(runs.some((run) => run.dbCpuUsPerAnswer !== undefined) ? { dbCpuUs: median(runs.map((run) => run.dbCpuUsPerAnswer ?? NaN)) } : {}),
  };
  const unexpected = runs.reduce((sum, run) => sum + notOk(run, expectedStatus), 0);
  if (unexpected > 0) row.note = `${unexpected} answers not ${expectedStatus}!`;
  return { row, runs };
}

function notOk(run: RunResult, expectedStatus = 200): number {
  let count = run.errors + run.timeouts;
  for (const [status, summary] of Object.entries(run.byStatus)) if (status !== String(expectedStatus)) count += summary.count;
  return count;
}

interface Contender {
  name: string;
  /** The server process, whose CPU time per answer is reported. */
  pid?: number;
  /** The process whose descendants are the database (the service that started the embedded Postgres). */
  dbParentPid?: number;
  expectedStatus?: number;
  run: (warmup: boolean) => Promise<RunResult>;
}

/**
 * Runs each contender once per round, the order reversed every other round, after one warm-up
 * each; returns the rows in the contenders' order.
 */
async function alternate(contenders: Contender[], rounds: number): Promise<Measured[]> {
  const results = new Map<string, CpuRun[]>(contenders.map((contender) => [contender.name, []]));
  for (const contender of contenders) {
    progress(`warm-up: ${contender.name}`);
    await contender.run(true);
  }
  for (let round = 0; round < rounds; round += 1) {
    for (const contender of round % 2 === 0 ? contenders : [...contenders].reverse()) {
      progress(`round ${round + 1}/${rounds}: ${contender.name}`);
      const before = contender.pid === undefined ? undefined : cpuMs(contender.pid);
      const dbBefore = contender.dbParentPid === undefined ? undefined : descendantsCpuMs(contender.dbParentPid);
      const result = await contender.run(false);
      const after = contender.pid === undefined ? undefined : cpuMs(contender.pid);
      const dbAfter = contender.dbParentPid === undefined ? undefined : descendantsCpuMs(contender.dbParentPid);
      const perAnswer = (from: number | undefined, to: number | undefined) =>
        from === undefined || to === undefined || result.responses === 0 ? undefined : ((to - from) * 1000) / result.responses;
      const cpuUsPerAnswer = perAnswer(before, after);
      const dbCpuUsPerAnswer = perAnswer(dbBefore, dbAfter);
      results.get(contender.name)!.push({
        ...result,
        ...(cpuUsPerAnswer === undefined ? {} : { cpuUsPerAnswer }),
        ...(dbCpuUsPerAnswer === undefined ? {} : { dbCpuUsPerAnswer }),
      });
    }
  }
  return contenders.map((contender) => summarize(contender.name, results.get(contender.name)!, contender.expectedStatus));
}

/** Runs a load and adds the CPU time the server process spent per answer. */
async function withCpu<T extends RunResult>(pid: number, load: () => Promise<T>): Promise<T & { cpuUsPerAnswer?: number }> {
  const before = cpuMs(pid);
  const result = await load();
  const after = cpuMs(pid);
  if (before === undefined || after === undefined || result.responses === 0) return result;
  return { ...result, cpuUsPerAnswer: ((after - before) * 1000) / result.responses };
}

/** RSS of a process, sampled until `during` settles. */
async function sampleRss(pid: number, during: Promise<unknown>, everyMs = 100): Promise<{ maxMiB: number; samples: number[] }> {
  const samples: number[] = [];
  let running = true;
  const settled = during.then(
    () => undefined,
    () => undefined,
  );
  void settled.then(() => {
    running = false;
  });
  while (running) {
    const rss = rssMiB(pid);
    if (rss !== undefined) samples.push(rss);
    await Promise.race([new Promise((resolve) => setTimeout(resolve, everyMs)), settled]);
  }
  return { maxMiB: Math.max(...samples), samples };
}

// ---------------------------------------------------------------------------------------------
// The setup: peers, load generator, contenders, the service

interface PeersInfo {
  network: string;
  rpcUrl: string;
  facilitatorUrl: string;
  targetUrl: string;
  routes: Record<string, string>;
  serviceEvmPrivateKey: `0x${string}`;
  clientEvmPrivateKey: `0x${string}`;
}

const BASE_SEPOLIA_CHAIN_ID = 84532;

async function throwawayDatabase(name: string): Promise<{ url: string; drop: () => Promise<void> } | undefined> {
  const serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) return undefined;
  const admin = new URL(serverUrl);
  admin.pathname = '/postgres';
  const run = async (statement: string) => {
    const client = new pg.Client({ connectionString: admin.toString() });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  await run(`create database "${name}"`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => run(`drop database if exists "${name}" with (force)`) };
}

interface Bench {
  options: Options;
  dataDir: string;
  /** The first service started the embedded Postgres (its descendants): their CPU is reported. */
  embeddedDatabase: boolean;
  peers: PeersInfo;
  peersChild: Child;
  loadgen: Child;
  bindings: Bindings;
  goals: Goal[];
  results: Record<string, unknown>;
  startService(name: string, overrides?: Record<string, string>, nodeFlags?: string[]): Promise<ServiceChild>;
  stopService(service: ServiceChild): Promise<void>;
  /** autocannon from the load generator: options.connections for options.durationS unless given. */
  autocannon(baseUrl: string, request: LoadRequest, extra?: Partial<AutocannonRun> & { check429?: { limit: number } }): Promise<LoadResult>;
}

// ---------------------------------------------------------------------------------------------
// Sections

async function passThrough(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  say();
  say(`## Pass-through: POST /proxy to a free x402 target vs a bare Node forwarder to the same target (${options.connections} connections)`);
  const [forwarder, forwarderPerCall] = await Promise.all([
    spawnChild({ name: 'forwarder', core: SERVER_CORE, script: 'load/runner/forwarder.ts', ipc: true, env: { BENCH_FORWARDER_AGENT: 'keepalive' } }),
    spawnChild({ name: 'forwarder-per-call', core: SERVER_CORE, script: 'load/runner/forwarder.ts', ipc: true, env: { BENCH_FORWARDER_AGENT: 'none' } }),
  ]);
  const forwarded: LoadRequest = { method: 'POST', path: '/', body: JSON.stringify({ api_url: bindings.freeUrl, method: 'GET' }) };
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const proxyRequest = requestOf('proxyFree', bindings);
  // The same request stopped earlier in the service: where /proxy's own time goes.
  const withoutKey: LoadRequest = { ...proxyRequest, headers: {} };
  const refusedTarget: LoadRequest = { ...proxyRequest, body: JSON.stringify({ api_url: 'http://10.0.0.1/free', method: 'GET' }) };
  const ofService = { pid: service.pid, ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}) };
  const rows = await alternate(
    [
      { name: 'bare forwarder (keep-alive to the target)', pid: forwarder.pid, run: (warmup) => bench.autocannon(forwarder.info.url, forwarded, duration(warmup)) },
      { name: 'bare forwarder (a connection per call)', pid: forwarderPerCall.pid, run: (warmup) => bench.autocannon(forwarderPerCall.info.url, forwarded, duration(warmup)) },
      { name: 'POST /proxy pass-through', ...ofService, run: (warmup) => bench.autocannon(service.url, proxyRequest, duration(warmup)) },
      { name: '  the same without x-api-key (401)', ...ofService, expectedStatus: 401, run: (warmup) => bench.autocannon(service.url, withoutKey, duration(warmup)) },
      { name: '  with the key, target refused by the guard (400)', ...ofService, expectedStatus: 400, run: (warmup) => bench.autocannon(service.url, refusedTarget, duration(warmup)) },
    ],
    options.rounds,
  );
  await Promise.all([forwarder.stop(), forwarderPerCall.stop()]);
  const [keepAlive, perCall, proxy, noKey, refused] = rows as [Measured, Measured, Measured, Measured, Measured];
  const ratio = proxy.row.rps / keepAlive.row.rps;
  proxy.row.note = `${fmt.pct(ratio)} of the keep-alive forwarder, ${fmt.pct(proxy.row.rps / perCall.row.rps)} of the per-call one ${proxy.row.note ?? ''}`.trim();
  noKey.row.note = `${noKey.row.note ?? ''} HTTP, express, openapi-backend, logging; no database`.trim();
  refused.row.note = `${refused.row.note ?? ''} + the API key (from memory once known), body validation, the SSRF check; nothing sent`.trim();
  say(table(rows.map((measured) => measured.row)));
  const micro = (value: number | undefined) => (value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(0));
  say(
    `  CPU per /proxy call, server side: ${micro((proxy.row.cpuUs ?? NaN) + (proxy.row.dbCpuUs ?? 0))} us (service ${micro(proxy.row.cpuUs)}, Postgres ${micro(proxy.row.dbCpuUs)}) ` +
      `against the forwarder's ${micro(keepAlive.row.cpuUs)} us (${micro(perCall.row.cpuUs)} us with a connection per call); of the service's: ` +
      `${micro(noKey.row.cpuUs)} us to answer at all, ${micro((refused.row.cpuUs ?? NaN) - (noKey.row.cpuUs ?? NaN))} us more (and ${micro(refused.row.dbCpuUs)} us of Postgres) for the key, body validation and the SSRF check, ` +
      `${micro((proxy.row.cpuUs ?? NaN) - (refused.row.cpuUs ?? NaN))} us more for the call to the target (the target's own work is in neither column).`,
  );
  bench.goals.push({ goal: "/proxy pass-through >= 60% of the bare forwarder's req/s", figure: `${fmt.pct(ratio)} (${fmt.rps(proxy.row.rps)} vs ${fmt.rps(keepAlive.row.rps)} req/s)`, met: ratio >= 0.6 });
  bench.results.passThrough = rows;
}

async function config(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  say();
  say(`## GET /config vs plain express 5 answering the same JSON (${options.connections} connections)`);
  const body = await (await fetch(`${service.url}/config`)).text();
  const plainExpress = await spawnChild({ name: 'plain-express', core: SERVER_CORE, script: 'load/runner/plainExpress.ts', ipc: true, env: { BENCH_CONFIG_BODY: body } });
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const rows = await alternate(
    [
      { name: 'plain express 5, same JSON', pid: plainExpress.pid, run: (warmup) => bench.autocannon(plainExpress.info.url, requestOf('config', bindings), duration(warmup)) },
      { name: 'GET /config', pid: service.pid, run: (warmup) => bench.autocannon(service.url, requestOf('config', bindings), duration(warmup)) },
    ],
    options.rounds,
  );
  await plainExpress.stop();
  rows[1]!.row.note = `${fmt.pct(rows[1]!.row.rps / rows[0]!.row.rps)} of plain express ${rows[1]!.row.note ?? ''}`.trim();
  say(table(rows.map((measured) => measured.row)));
  bench.results.config = rows;
}

type PaidRun = PaidResult & { phases: { toTarget: number[]; toPaidRequest: number[]; toAnswer: number[] } };

async function paid(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings, peers } = bench;
  say();
  say(`## Paid call: x402-fetch straight to the paid target vs paid POST /proxy to it (one call at a time, ${options.paidCalls} calls per run)`);
  // Each call reaches the target twice (unpaid, then paid): the target's arrival times split a
  // call in three: until the target is first called, from its 402 to the paid request, and from
  // the paid request to the answer.
  const run = async (mode: 'direct' | 'proxy', count: number): Promise<PaidRun> => {
    await bench.peersChild.call('reset');
    const result = await bench.loadgen.call<PaidResult>(
      'paid',
      {
        run: {
          mode,
          url: service.url,
          targetUrl: bindings.paidUrl,
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
    const arrivals = await bench.peersChild.call<Array<{ route: string; paid: boolean; receivedAtMs: number }>>('requests', { last: 2 * count });
    const phases = { toTarget: [] as number[], toPaidRequest: [] as number[], toAnswer: [] as number[] };
    if (arrivals.length === 2 * result.calls.length) {
      result.calls.forEach(([start, end], index) => {
        const [unpaid, paidRequest] = [arrivals[2 * index]!, arrivals[2 * index + 1]!];
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
      { name: 'POST /proxy -> paid target', pid: service.pid, ...(bench.embeddedDatabase ? { dbParentPid: service.pid } : {}), run: (warmup) => run('proxy', count(warmup)) },
    ],
    options.rounds,
  );
  for (const measured of rows) {
    const failure = (measured.runs as PaidRun[]).flatMap((result) => result.failures)[0];
    if (failure) measured.row.note = `${measured.row.note ?? ''} first: ${failure}`.trim();
  }
  const delta = rows[1]!.row.p50 - rows[0]!.row.p50;
  rows[1]!.row.note = `+${fmt.ms(delta)} ms p50 over the direct call ${rows[1]!.row.note ?? ''}`.trim();
  say(table(rows.map((measured) => measured.row)));
  const phase = (measured: Measured, name: keyof PaidRun['phases']) => median((measured.runs as PaidRun[]).flatMap((result) => result.phases[name]));
  const [direct, proxied] = rows as [Measured, Measured];
  say('  Where the time goes (medians over every call, from the target\'s arrival times; ms):');
  say(`    ${''.padEnd(30)} ${'to the target'.padStart(14)} ${'402 -> paid call'.padStart(17)} ${'paid call -> answer'.padStart(20)}`);
  for (const [name, measured] of [['x402-fetch (direct)', direct], ['POST /proxy', proxied]] as const) {
    say(`    ${name.padEnd(30)} ${fmt.ms(phase(measured, 'toTarget')).padStart(14)} ${fmt.ms(phase(measured, 'toPaidRequest')).padStart(17)} ${fmt.ms(phase(measured, 'toAnswer')).padStart(20)}`);
  }
  say(
    `    /proxy adds ${fmt.ms(phase(proxied, 'toTarget') - phase(direct, 'toTarget'))} ms before the target is called (request in, key, validation, the SSRF check), ` +
      `${fmt.ms(phase(proxied, 'toPaidRequest') - phase(direct, 'toPaidRequest'))} ms between the 402 and the paid request (credits reserved, signing, the row marked signed), ` +
      `${fmt.ms(phase(proxied, 'toAnswer') - phase(direct, 'toAnswer'))} ms after the paid request (the chain read back, credits charged).`,
  );
  bench.goals.push({ goal: 'paid /proxy adds <= 10 ms p50 over the direct call', figure: `+${fmt.ms(delta)} ms (${fmt.ms(rows[1]!.row.p50)} vs ${fmt.ms(rows[0]!.row.p50)} ms)`, met: delta <= 10 });
  bench.results.paid = rows;
}

async function logging(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  if (options.logLevel === 'info') return;
  say();
  say(`## Logging: LOG_LEVEL=info (a JSON line per request, to a file) vs LOG_LEVEL=${options.logLevel}`);
  const verbose = await bench.startService('service-log-info', { LOG_LEVEL: 'info', RUN_WORKER: 'false' });
  const duration = (warmup: boolean) => ({ duration: warmup ? options.warmupS : options.durationS });
  const rows = await alternate(
    [
      { name: `GET /config, LOG_LEVEL=${options.logLevel}`, pid: service.pid, run: (warmup) => bench.autocannon(service.url, requestOf('config', bindings), duration(warmup)) },
      { name: 'GET /config, LOG_LEVEL=info', pid: verbose.pid, run: (warmup) => bench.autocannon(verbose.url, requestOf('config', bindings), duration(warmup)) },
      { name: `POST /proxy pass-through, LOG_LEVEL=${options.logLevel}`, pid: service.pid, run: (warmup) => bench.autocannon(service.url, requestOf('proxyFree', bindings), duration(warmup)) },
      { name: 'POST /proxy pass-through, LOG_LEVEL=info', pid: verbose.pid, run: (warmup) => bench.autocannon(verbose.url, requestOf('proxyFree', bindings), duration(warmup)) },
    ],
    Math.max(1, options.rounds - 1),
  );
  await bench.stopService(verbose);
  rows[1]!.row.note = `${fmt.pct(rows[1]!.row.rps / rows[0]!.row.rps)} of LOG_LEVEL=${options.logLevel}`;
  rows[3]!.row.note = `${fmt.pct(rows[3]!.row.rps / rows[2]!.row.rps)} of LOG_LEVEL=${options.logLevel}`;
  say(table(rows.map((measured) => measured.row)));
  bench.results.logging = rows;
}

async function soak(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, bindings } = bench;
  const { ratePerSecond, mix } = scenarios.soak;
  say();
  say(`## Soak: ${ratePerSecond} req/s of the soak mix for ${options.soakS} s (${Object.entries(mix).map(([name, weight]) => `${name} ${weight}`).join(', ')})`);
  const entries = Object.entries(mix).map(([name, weight]) => ({ name, request: requestOf(name as RequestName, bindings), weight: weight! }));
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
        note: Object.entries(summary.statuses).map(([status, count]) => `${status} x${count}`).join(', '),
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

async function caps(bench: Bench): Promise<void> {
  const { options, bindings } = bench;
  const cap = options.overloadCap;
  const factor = scenarios.caps.benchOverloadFactor;
  say();
  say(`## Caps under ${factor}x overload: CAP_PROXY=CAP_RELAY=CAP_WEBHOOKS=${cap}, ${factor * cap} concurrent clients per group`);
  const service = await bench.startService('service-caps', { CAP_PROXY: String(cap), CAP_RELAY: String(cap), CAP_WEBHOOKS: String(cap), RUN_WORKER: 'false' });
  const target = {
    reset: () => bench.peersChild.call('reset'),
    stats: () => bench.peersChild.call('holdStats'),
    release: () => bench.peersChild.call('holdRelease', {}),
  };
  const active = async (group: CapGroup) => {
    const response = await fetch(`${service.url}/metrics/rate-limits`);
    return ((await response.json()) as Record<CapGroup, { active: number }>)[group].active;
  };
  const durationS = Math.max(3, options.durationS);
  const reports: CapsReport[] = [];
  const rows: Row[] = [];
  const record = (name: string, report: CapsReport) => {
    reports.push(report);
    const refused = report.load.byStatus['429'];
    const cpuUs = (report.load as LoadResult & { cpuUsPerAnswer?: number }).cpuUsPerAnswer;
    rows.push({
      name,
      rps: (refused?.count ?? 0) / report.load.durationS,
      p50: refused?.p50 ?? NaN,
      p99: refused?.p99 ?? NaN,
      ...(cpuUs === undefined ? {} : { cpuUs }),
      note:
        `admitted ${report.admitted}/${cap}` +
        (report.maxWaiting === undefined ? '' : `, most waiting at the target ${report.maxWaiting}`) +
        `, over the cap ${report.overCap}, surplus not 429 ${report.notRefused}, bad 429s ${report.load.bad429}` +
        (report.lateArrivals === undefined ? '' : `; once the clients left: ${report.lateArrivals} more reached the target (${report.maxWaitingWithTeardown} waiting at once)`),
    });
    return report;
  };
  // /proxy and /relay: the held requests wait at the target's /hold route, which counts them.
  const heldAtTarget = (group: 'proxy' | 'relay', request: LoadRequest, ratePerSecond?: number) =>
    runCapsScenario({
      group,
      cap,
      factor,
      durationS,
      request,
      heldBy: 'target',
      target,
      load: (clients, seconds) => ({
        done: withCpu(service.pid, () =>
          bench.loadgen.call<LoadResult>('clients', { run: { baseUrl: service.url, request, clients, durationS: seconds, ratePerSecond, check429: { limit: cap } } }),
        ),
        stop: () => void bench.loadgen.call('stop'),
      }),
      active: () => active(group),
    });
  // /webhooks answers at once: its cap is held by clients of this process (headers sent, body unfinished).
  let held: HeldRequest[] = [];
  const heldByClients = (paced?: number) =>
    runCapsScenario({
      group: 'webhooks',
      cap,
      factor,
      durationS,
      request: requestOf('webhook', bindings),
      heldBy: 'client',
      clients: {
        async hold(count) {
          held = Array.from({ length: count }, () => holdRequest(service.url, 'GET', `/webhooks/${UNKNOWN_WEBHOOK_ID}`, {}));
          const deadline = Date.now() + 10_000;
          while ((await active('webhooks')) < count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
        },
        async release() {
          return (await Promise.all(held.map((request) => request.release()))).map((answer) => answer.status);
        },
      },
      // autocannon at full speed; paced runs use the evenly paced clients (autocannon's rate limit
      // sends each second's requests in one burst at the start of the second).
      load: (connections, seconds) => ({
        done: withCpu(service.pid, () =>
          paced === undefined
            ? bench.autocannon(service.url, requestOf('webhook', bindings), { connections, duration: seconds, check429: { limit: cap } })
            : bench.loadgen.call<LoadResult>('clients', {
                run: { baseUrl: service.url, request: requestOf('webhook', bindings), clients: connections, durationS: seconds, ratePerSecond: paced, check429: { limit: cap } },
              }),
        ),
        stop: () => void bench.loadgen.call('stop'),
      }),
      active: () => active('webhooks'),
    });
  const refusedRate = (report: CapsReport) => (report.load.byStatus['429']?.count ?? 0) / report.load.durationS;
  // Paced runs: the same concurrency at a quarter of the saturated rate, so that a 429 does not
  // queue behind the others: what one costs.
  const quarter = (report: CapsReport) => Math.max(50, Math.round(refusedRate(report) / 4));

  progress('caps: POST /proxy, closed loop');
  const proxy = record('POST /proxy, closed loop (saturated)', await heldAtTarget('proxy', requestOf('proxyHold', bindings)));
  progress(`caps: POST /proxy, paced at ${quarter(proxy)} req/s`);
  const proxyPaced = record(`POST /proxy, paced at ${quarter(proxy)} req/s`, await heldAtTarget('proxy', requestOf('proxyHold', bindings), quarter(proxy)));
  const probe = await fetch(`${service.url}/relay`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ api_url: bindings.freeUrl, method: 'GET' }) });
  await probe.text();
  if (probe.status === 501) {
    rows.push({ name: 'POST /relay', rps: NaN, p50: NaN, p99: NaN, note: 'skipped: /relay answers 501 Not Implemented on this build' });
  } else {
    progress('caps: POST /relay, closed loop');
    record('POST /relay, closed loop (saturated)', await heldAtTarget('relay', requestOf('relayHold', bindings)));
  }
  progress('caps: GET /webhooks/{id}, keep-alive');
  const webhooks = record('GET /webhooks/{id}, keep-alive (saturated)', await heldByClients());
  progress(`caps: GET /webhooks/{id}, paced at ${quarter(webhooks)} req/s`);
  const webhooksPaced = record(`GET /webhooks/{id}, keep-alive, paced at ${quarter(webhooks)} req/s`, await heldByClients(quarter(webhooks)));
  // Control: what this machine gives a trivial express answer at the same pace and concurrency.
  progress('caps: control, plain express at the same pace');
  const plainExpress = await spawnChild({ name: 'plain-express', core: SERVER_CORE, script: 'load/runner/plainExpress.ts', ipc: true });
  const control = await withCpu(plainExpress.pid, () =>
    bench.loadgen.call<LoadResult>('clients', {
      run: { baseUrl: plainExpress.info.url, request: requestOf('config', bindings), clients: (factor - 1) * cap, durationS, ratePerSecond: quarter(webhooks) },
    }),
  );
  await plainExpress.stop();
  rows.push({
    name: `control: plain express GET, paced at ${quarter(webhooks)} req/s`,
    rps: control.rps,
    p50: control.latency.p50,
    p99: control.latency.p99,
    ...((control as LoadResult & { cpuUsPerAnswer?: number }).cpuUsPerAnswer === undefined ? {} : { cpuUs: (control as LoadResult & { cpuUsPerAnswer?: number }).cpuUsPerAnswer }),
    note: 'the same clients and pace against a bare express app: the machine\'s own tail',
  });
  progress('caps: POST /proxy, clients that disconnect');
  const disconnect = await runDisconnectScenario({
    cap,
    target,
    active: () => active('proxy'),
    send() {
      const body = requestOf('proxyHold', bindings).body!;
      const url = new URL('/proxy', service.url);
      const request = http.request(url, {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'x-api-key': bindings.apiKey! },
      });
      request.on('error', () => undefined);
      request.end(body);
      return { abort: () => request.destroy() };
    },
  });
  const warnings = readFileSync(path.join(bench.dataDir, 'service-caps.log'), 'utf8').split('\n').filter((line) => line.includes('concurrency cap reached')).length;
  await bench.stopService(service);

  say(table(rows));
  say('  POST 429s carry Connection: close (the body is not read): each costs the client a new connection.');
  say(`  The service wrote ${warnings.toLocaleString('en-US')} "concurrency cap reached" warn lines (one per 429).`);
  const late = reports.reduce((sum, report) => sum + (report.lateArrivals ?? 0), 0);
  say(
    `  Clients that disconnect: ${cap} /proxy calls held at the target, their clients gone -> the service reports ${disconnect.activeAfterDisconnect} active; ` +
      `${cap} more admitted -> ${disconnect.waitingAtTarget} calls at the target at once (cap ${cap}).`,
  );
  if (late > 0) say(`  ${late} requests of the runs above reached the target after their clients had disconnected (counted apart).`);
  const overCap = reports.reduce((sum, report) => sum + report.overCap, 0);
  const notRefused = reports.reduce((sum, report) => sum + report.notRefused, 0);
  const bad429 = reports.reduce((sum, report) => sum + report.load.bad429, 0);
  const refusedTotal = reports.reduce((sum, report) => sum + (report.load.byStatus['429']?.count ?? 0), 0);
  bench.goals.push({
    goal: 'zero requests over a cap',
    figure:
      `${overCap} over while clients stay connected (${refusedTotal.toLocaleString('en-US')} 429s checked: ${bad429} without Retry-After or the documented body, ` +
      `${notRefused} surplus answers not 429); but with clients that disconnect, ${disconnect.waitingAtTarget} calls reached the target at once (cap ${cap})`,
    met: overCap === 0 && bad429 === 0 && notRefused === 0 && reports.every((report) => (report.maxWaitingWithTeardown ?? 0) <= cap) && disconnect.waitingAtTarget <= cap,
  });
  const p99 = Math.max(proxyPaced.load.byStatus['429']?.p99 ?? NaN, webhooksPaced.load.byStatus['429']?.p99 ?? NaN);
  bench.goals.push({
    goal: '429 answered in <= 2 ms p99 under overload',
    figure:
      `paced: ${fmt.ms(proxyPaced.load.byStatus['429']?.p99 ?? NaN)} ms POST /proxy, ${fmt.ms(webhooksPaced.load.byStatus['429']?.p99 ?? NaN)} ms GET /webhooks; ` +
      `p50 ${fmt.ms(proxyPaced.load.byStatus['429']?.p50 ?? NaN)} and ${fmt.ms(webhooksPaced.load.byStatus['429']?.p50 ?? NaN)} ms; plain express at the same pace: p99 ${fmt.ms(control.latency.p99)} ms; ` +
      `saturated (clients queue: latency = clients / throughput): ${fmt.ms(proxy.load.byStatus['429']?.p99 ?? NaN)} and ${fmt.ms(webhooks.load.byStatus['429']?.p99 ?? NaN)} ms`,
    met: p99 <= 2,
  });
  bench.results.caps = { reports, disconnect };
}

async function memory(bench: Bench): Promise<void> {
  const { bindings } = bench;
  say();
  say('## Memory: RSS of the service process (a fresh one) with 500 connections');
  const service = await bench.startService('service-rss');
  await bench.autocannon(service.url, requestOf('config', bindings), { connections: 10, duration: 1 });
  await bench.autocannon(service.url, requestOf('proxyFree', bindings), { connections: 10, duration: 1 });
  const idle = rssMiB(service.pid) ?? NaN;
  const opened = await bench.loadgen.call<{ open: number; failed: number }>('open', { baseUrl: service.url, count: 500, path: '/health' });
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
    ['500 connections of GET /config (max)', config.rss, `${fmt.rps(config.result.rps)} req/s, p99 ${fmt.ms(config.result.latency.p99)} ms, ${notOk(config.result)} not 200`],
    ['500 connections of POST /proxy pass-through (max)', proxy.rss, `${fmt.rps(proxy.result.rps)} req/s, p99 ${fmt.ms(proxy.result.latency.p99)} ms, ${notOk(proxy.result)} not 200`],
  ];
  for (const [name, value, note] of lines) say(`  ${name.padEnd(52)} ${value.toFixed(0).padStart(5)} MiB  ${note}`);
  const most = Math.max(idleConnections, config.rss, proxy.rss);
  const megabytes = (most * 1048576) / 1e6;
  bench.goals.push({ goal: 'RSS <= 250 MB with 500 connections', figure: `${megabytes.toFixed(0)} MB (${most.toFixed(0)} MiB) at most; ${((idleConnections * 1048576) / 1e6).toFixed(0)} MB with 500 idle ones`, met: megabytes <= 250 });
  bench.results.memory = { idle, idleConnections, config, proxy };
}

async function profiles(bench: Bench): Promise<void> {
  const { options, bindings, peers } = bench;
  const directory = path.join(ROOT, '.tmp', 'bench-profiles', String(bench.results.runId));
  const paidCalls = (count: number, url: string) =>
    bench.loadgen.call<RunResult>(
      'paid',
      {
        run: {
          mode: 'proxy',
          url,
          targetUrl: bindings.paidUrl,
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
  const loads: Array<[string, string, (url: string, warmup: boolean) => Promise<RunResult>]> = [
    ['proxy-pass-through', `POST /proxy pass-through (${options.connections} connections)`, (url, warmup) =>
      bench.autocannon(url, requestOf('proxyFree', bindings), { duration: warmup ? options.warmupS : Math.max(5, options.durationS) })],
    ['config', `GET /config (${options.connections} connections)`, (url, warmup) =>
      bench.autocannon(url, requestOf('config', bindings), { duration: warmup ? options.warmupS : Math.max(5, options.durationS) })],
    ['proxy-paid', `paid POST /proxy (one call at a time, ${options.paidCalls} calls)`, (url, warmup) => paidCalls(warmup ? 5 : options.paidCalls, url)],
  ];
  for (const [name, title, load] of loads) {
    const dir = path.join(directory, name);
    const service = await bench.startService(`service-profile-${name}`, {}, ['--cpu-prof', `--cpu-prof-dir=${dir}`]);
    await load(service.url, true);
    const loadStart = performance.now();
    const run = await load(service.url, false);
    const loadEnd = performance.now();
    await bench.stopService(service);
    const exitedAt = performance.now();
    // The main thread's profile (tsx's loader thread writes its own), and only the measured run.
    const file = readdirSync(dir)
      .filter((entry) => entry.endsWith('.cpuprofile'))
      .sort()[0];
    say();
    say(`## CPU profile of the service under ${title}: ${fmt.rps(run.rps)} req/s`);
    if (!file) {
      say('  no profile was written');
      continue;
    }
    say(`  ${path.relative(ROOT, path.join(dir, file))}`);
    const summary = summarizeProfile(path.join(dir, file), 20, { fromMsBeforeEnd: exitedAt - loadStart, toMsBeforeEnd: exitedAt - loadEnd });
    say(formatProfile(summary, run.responses).replace(/^/gm, '  '));
  }
}

// ---------------------------------------------------------------------------------------------
// The run

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const runId = `${new Date().toISOString().replace(/[-:]/g, '').slice(0, 15)}-${process.pid}`;
  const tmp = path.join(ROOT, '.tmp');
  mkdirSync(tmp, { recursive: true });
  pruneStaleClusters(tmp, 'bench-');
  const dataDir = path.join(tmp, `bench-${runId}`);
  mkdirSync(dataDir, { recursive: true });
  const startedAt = Date.now();
  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;

  say(`# ${command}`);
  if (pinningAvailable()) {
    const database = process.env.DATABASE_URL ? '' : ', its embedded Postgres';
    say(`pinned with taskset: server side (service${database}, peers, forwarder, express) on core ${SERVER_CORE}, load generator on core ${LOAD_CORE}`);
  } else {
    say('WARNING: taskset is not available (or fewer than 2 cores): running unpinned. Figures vary by up to 40% from run to run;');
    say('         compare only the contenders of one table of one run.');
  }
  say(
    `node ${process.version}; ${options.rounds} alternating rounds of ${options.durationS} s per contender after a warm-up, medians; LOG_LEVEL=${options.logLevel}` +
      (options.nodeFlags.length > 0 ? `; service node flags: ${options.nodeFlags.join(' ')}` : ''),
  );
  const load = () => os.loadavg().map((value) => value.toFixed(2)).join(' ');
  say(`load average before the run: ${load()} (${os.cpus().length} cores; other work on the machine shows up as noise)`);
  const throwaway = await throwawayDatabase(`bench_${runId.replace(/[^0-9a-z]/gi, '_').toLowerCase()}`);
  say(throwaway ? "database: a throwaway database on DATABASE_URL's server" : `database: the service's embedded Postgres in ${path.relative(ROOT, dataDir)}`);

  const services: ServiceChild[] = [];
  const cleanup = async () => {
    for (const service of services.splice(0).reverse()) await service.stop().catch(() => {});
    await stopAllChildren();
    await throwaway?.drop().catch((error: unknown) => say(`could not drop the throwaway database: ${String(error)}`));
    if (!options.keep) rmSync(dataDir, { recursive: true, force: true });
  };
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) return;
    interrupted = true;
    process.stderr.write('\ninterrupted: stopping the children\n');
    void cleanup().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    progress('starting the local peers and the load generator');
    const [peersChild, loadgen] = await Promise.all([
      spawnChild({ name: 'peers', core: SERVER_CORE, script: 'load/runner/peers.ts', ipc: true, echoStderr: true, readyTimeoutMs: 120_000 }),
      spawnChild({ name: 'loadgen', core: LOAD_CORE, script: 'load/runner/loadgen.ts', ipc: true, echoStderr: true }),
    ]);
    const peers = peersChild.info as PeersInfo;
    // Set once the first service has started its database: the others use that one.
    let sharedDatabaseUrl: string | undefined;
    const serviceEnv = (overrides: Record<string, string>): Record<string, string> => ({
      NETWORKS: peers.network,
      RPC_URL_BASE_SEPOLIA: peers.rpcUrl,
      EVM_PRIVATE_KEY: peers.serviceEvmPrivateKey,
      FACILITATOR_URL: peers.facilitatorUrl,
      SSRF_ALLOW_HOSTS: new URL(peers.targetUrl).host,
      LOG_LEVEL: options.logLevel,
      SHUTDOWN_GRACE_MS: '2000',
      PROXY_DAILY_PER_ACCOUNT_USD: '1000000',
      PROXY_DAILY_TOTAL_USD: '1000000',
      // Raised for throughput: the caps must not limit those runs (the caps section sets its own).
      CAP_PROXY: '100000',
      CAP_RELAY: '100000',
      CAP_WEBHOOKS: '100000',
      DATABASE_URL: sharedDatabaseUrl ?? throwaway?.url ?? '',
      ...overrides,
    });
    const bench: Bench = {
      options,
      dataDir,
      embeddedDatabase: throwaway === undefined,
      peers,
      peersChild,
      loadgen,
      bindings: {},
      goals: [],
      results: { runId, options: { ...options, sections: [...options.sections] }, pinned: pinningAvailable(), node: process.version },
      async startService(name, overrides = {}, nodeFlags) {
        progress(`starting the service (${name})`);
        const service = await startServiceChild({ name, core: SERVER_CORE, dataDir, env: serviceEnv(overrides), nodeFlags: [...options.nodeFlags, ...(nodeFlags ?? [])] });
        services.push(service);
        return service;
      },
      async stopService(service) {
        services.splice(services.indexOf(service), 1);
        await service.stop();
      },
      autocannon(baseUrl, request, extra = {}) {
        const { check429, ...run } = extra;
        return loadgen.call<LoadResult>('autocannon', {
          run: { baseUrl, request, connections: options.connections, duration: options.durationS, ...run },
          ...(check429 ? { check429 } : {}),
        });
      },
    };

    // The first service also owns the embedded Postgres: it runs until the end.
    const service = await bench.startService('service');
    sharedDatabaseUrl = service.databaseUrl;
    const handle = createDb(service.databaseUrl, { maxConnections: 1 });
    try {
      const organisation = await createOrganisation(handle.db, 'Bench');
      await grantCredits(handle.db, organisation.organisationId, 100_000_000n, 'bench grant');
      const { key } = await createApiKey(handle.db, organisation.accountId, 100_000_000n);
      bench.bindings = { holdUrl: peers.routes.hold, freeUrl: peers.routes.free, paidUrl: peers.routes.paid, webhookId: UNKNOWN_WEBHOOK_ID, apiKey: key };
    } finally {
      await handle.close();
    }

    const sections: Array<[Section, () => Promise<void>]> = [
      ['pass', () => passThrough(bench, service)],
      ['config', () => config(bench, service)],
      ['paid', () => paid(bench, service)],
      ['logging', () => logging(bench, service)],
      ['soak', () => soak(bench, service)],
      ['caps', () => caps(bench)],
      ['rss', () => memory(bench)],
      ['profile', () => profiles(bench)],
    ];
    for (const [section, run] of sections) {
      if (!options.sections.has(section)) continue;
      // Only one service takes load at a time: the first one idles while the others run.
      await run();
    }

    if (bench.goals.length > 0) {
      say();
      say('## Goals');
      for (const goal of bench.goals) say(`  ${goal.met ? 'MET  ' : 'SHORT'}  ${goal.goal}: ${goal.figure}`);
    }
    say();
    say(`load average after the run: ${load()}`);
    say(`rerun: ${command}   (this run took ${Math.round((Date.now() - startedAt) / 1000)} s)`);
    const jsonFile = options.json ?? path.join(ROOT, '.tmp', 'bench-results', `${runId}.json`);
    mkdirSync(path.dirname(jsonFile), { recursive: true });
    writeFileSync(jsonFile, JSON.stringify({ ...bench.results, goals: bench.goals }, (_key, value) => (typeof value === 'bigint' ? String(value) : value), 2));
    say(`every figure of this run: ${path.relative(ROOT, jsonFile)}`);
  } finally {
    await cleanup();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
