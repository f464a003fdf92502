/**
 * `npm run bench`: the long form of the load runner. Everything runs on 127.0.0.1 in child
 * processes: the local peers (chain, facilitators, x402 targets of both versions), the service
 * (configured by environment only; built first and run as `npm run serve` runs it, node over
 * dist/, or with --tsx as `npm start` runs it), a bare Node forwarder and a plain express
 * app, all pinned to core 0; the load generator (autocannon, node:http clients, x402-fetch)
 * pinned to core 1. The contenders of each comparison alternate runs; medians are reported.
 *
 *   npm run bench                          everything but the profiles (about 5 minutes)
 *   npm run bench -- --quick               shorter runs, fewer rounds, no soak
 *   npm run bench -- --only pass,config    only these sections: pass, config, paid, verify, logging,
 *                                          soak, caps, instances, rss, floor, profile (profile: CPU profiles
 *                                          of the service; instances: two API instances and a worker
 *                                          on one Postgres behind a round robin; verify: X-PAYMENT
 *                                          verifications per second on one core, in-process; usage:
 *                                          GET /v1/payments and GET /v1/usage with 100,000 payment rows
 *                                          in a database of its own, p50 and p95; vouchers: batch-settlement
 *                                          voucher verifications per second on one core, in-process; channel:
 *                                          POST /proxy paying a batch-settlement target from our channel
 *                                          against @x402/fetch's batch-settlement client paying it directly,
 *                                          and that client paying through POST /relay (to the batch-settlement
 *                                          target, and to an exact target against x402-fetch paying it),
 *                                          p50 and p95 on vouchers only, and the transactions on chain)
 *   options: --rounds N --duration S --connections N --paid-calls N --overload-cap N --soak S
 *            --log-level L --node-flags "FLAGS" (for the service) --tsx --no-pin --keep --json FILE
 *
 * Database: DATABASE_URL when set (a throwaway database is created on that server and dropped),
 * else the service's embedded Postgres in a throwaway DATA_DIR under .tmp/.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDb } from '../../db/index';
import { pruneStaleClusters } from '../../db/embedded';
import { createApiKey, createOrganisation } from '../../payments/accounts/accounts';
import { grantCredits } from '../../payments/accounts/credits';
import type { LoadResult } from './caps';
import { pinningAvailable, ROOT, spawnChild, stopAllChildren } from './children';
import { UNKNOWN_WEBHOOK_ID } from './scenarios';
import { startServiceChild, type ServiceChild } from './serviceChild';
import { parseOptions, type Options, type Section } from './bench/options';
import { goalLine, LOAD_CORE, progress, say, SERVER_CORE } from './bench/output';
import { throwawayDatabase, type Bench, type PeersInfo } from './bench/setup';
import { caps } from './bench/sections/caps';
import { channel } from './bench/sections/channel';
import { instances } from './bench/sections/instances';
import { config } from './bench/sections/config';
import { logging } from './bench/sections/logging';
import { memory } from './bench/sections/memory';
import { paid } from './bench/sections/paid';
import { floor } from './bench/sections/floor';
import { passThrough } from './bench/sections/passThrough';
import { profiles } from './bench/sections/profiles';
import { soak } from './bench/sections/soak';
import { usage } from './bench/sections/usage';
import { verify } from './bench/sections/verify';
import { vouchers } from './bench/sections/vouchers';

/** One run of the bench: its id, its scratch directory, the command that reruns it. */
interface Run {
  options: Options;
  runId: string;
  dataDir: string;
  startedAt: number;
  command: string;
  throwaway: { url: string; drop: () => Promise<void> } | undefined;
}

const loadAverage = () =>
  os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');

async function main(): Promise<void> {
  const run = await prepareRun(parseOptions(process.argv.slice(2)));
  const services: ServiceChild[] = [];
  const cleanup = async () => {
    for (const service of services.splice(0).reverse()) await service.stop().catch(() => {});
    await stopAllChildren();
    await run.throwaway
      ?.drop()
      .catch((error: unknown) => say(`could not drop the throwaway database: ${String(error)}`));
    if (!run.options.keep) rmSync(run.dataDir, { recursive: true, force: true });
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
    const bench = await startBench(run, services);
    // The first service also owns the embedded Postgres: it runs until the end.
    const service = await bench.startService('service');
    bench.sharedDatabaseUrl = service.databaseUrl;
    await seedAccount(bench, service);
    await runSections(bench, service);
    writeResults(run, bench);
  } finally {
    await cleanup();
  }
}

/** The run's id and directories, and its header: pinning, node, rounds, load average, database. */
async function prepareRun(options: Options): Promise<Run> {
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
    say(
      `pinned with taskset: server side (service${database}, peers, forwarder, express) on core ${SERVER_CORE}, load generator on core ${LOAD_CORE}`,
    );
  } else {
    say(
      'WARNING: taskset is not available (or fewer than 2 cores): running unpinned. Figures vary by up to 40% from run to run;',
    );
    say('         compare only the contenders of one table of one run.');
  }
  say(
    `node ${process.version}; ${options.rounds} alternating rounds of ${options.durationS} s per contender after a warm-up, medians; LOG_LEVEL=${options.logLevel}` +
      (options.nodeFlags.length > 0 ? `; service node flags: ${options.nodeFlags.join(' ')}` : ''),
  );
  say(
    `load average before the run: ${loadAverage()} (${os.cpus().length} cores; other work on the machine shows up as noise)`,
  );
  if (options.runtime === 'built') {
    const built = spawnSync(process.execPath, ['tools/build.mjs'], { cwd: ROOT, encoding: 'utf8' });
    if (built.status !== 0) throw new Error(`npm run build failed: ${built.stderr}`);
    say("service: production's way, built by npm run build and run as npm run serve runs it (--tsx: npm start's way)");
  } else {
    say("service: npm start's way, TypeScript through tsx's loader");
  }
  const throwaway = await throwawayDatabase(`bench_${runId.replace(/[^0-9a-z]/gi, '_').toLowerCase()}`);
  say(
    throwaway
      ? "database: a throwaway database on DATABASE_URL's server"
      : `database: the service's embedded Postgres in ${path.relative(ROOT, dataDir)}`,
  );
  return { options, runId, dataDir, startedAt, command, throwaway };
}

/** The local peers and the load generator started, and the Bench the sections share. */
async function startBench({ options, runId, dataDir, throwaway }: Run, services: ServiceChild[]): Promise<Bench> {
  progress('starting the local peers and the load generator');
  const [peersChild, loadgen] = await Promise.all([
    spawnChild({
      name: 'peers',
      core: SERVER_CORE,
      script: 'load/runner/peers.ts',
      ipc: true,
      echoStderr: true,
      readyTimeoutMs: 120_000,
    }),
    spawnChild({ name: 'loadgen', core: LOAD_CORE, script: 'load/runner/loadgen.ts', ipc: true, echoStderr: true }),
  ]);
  const peers = peersChild.info as PeersInfo;
  const serviceEnv = (overrides: Record<string, string>): Record<string, string> => ({
    NETWORKS: peers.network,
    RPC_URL_BASE_SEPOLIA: peers.rpcUrl,
    EVM_PRIVATE_KEY: peers.serviceEvmPrivateKey,
    FACILITATOR_URL: peers.facilitatorUrl,
    SSRF_ALLOW_HOSTS: [peers.targetUrl, peers.v2TargetUrl].map((url) => new URL(url).host).join(','),
    LOG_LEVEL: options.logLevel,
    SHUTDOWN_GRACE_MS: '2000',
    PROXY_DAILY_PER_ACCOUNT_USD: '1000000',
    PROXY_DAILY_TOTAL_USD: '1000000',
    RELAY_DAILY_PER_WALLET_USD: '1000000',
    RELAY_DAILY_TOTAL_USD: '1000000',
    // Raised for throughput: the caps must not limit those runs (the caps section sets its own).
    CAP_PROXY: '100000',
    CAP_RELAY: '100000',
    CAP_WEBHOOKS: '100000',
    DATABASE_URL: bench.sharedDatabaseUrl ?? throwaway?.url ?? '',
    ...overrides,
  });
  const bench: Bench = {
    options,
    dataDir,
    embeddedDatabase: throwaway === undefined,
    sharedDatabaseUrl: undefined,
    peers,
    peersChild,
    loadgen,
    bindings: {},
    goals: [],
    results: {
      runId,
      options: { ...options, sections: [...options.sections] },
      pinned: pinningAvailable(),
      node: process.version,
    },
    async startService(name, overrides = {}, nodeFlags, built = options.runtime === 'built') {
      progress(`starting the service (${name})`);
      const service = await startServiceChild({
        name,
        core: SERVER_CORE,
        dataDir,
        env: serviceEnv(overrides),
        nodeFlags: [...options.nodeFlags, ...(nodeFlags ?? [])],
        built,
      });
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
  return bench;
}

/** An organisation with credits and an API key: the bindings of the requests. */
async function seedAccount(bench: Bench, service: ServiceChild): Promise<void> {
  const { peers } = bench;
  const handle = createDb(service.databaseUrl, { maxConnections: 1 });
  try {
    const organisation = await createOrganisation(handle.db, 'Bench');
    await grantCredits(handle.db, organisation.organisationId, 100_000_000n, 'bench grant');
    const { key } = await createApiKey(handle.db, organisation.accountId, 100_000_000n);
    bench.bindings = {
      holdUrl: peers.routes.hold,
      freeUrl: peers.routes.free,
      paidUrl: peers.routes.paid,
      webhookId: UNKNOWN_WEBHOOK_ID,
      apiKey: key,
    };
  } finally {
    await handle.close();
  }
}

async function runSections(bench: Bench, service: ServiceChild): Promise<void> {
  const sections: Array<[Section, () => Promise<void>]> = [
    ['pass', () => passThrough(bench, service)],
    ['config', () => config(bench, service)],
    ['paid', () => paid(bench, service)],
    ['verify', () => verify(bench, service)],
    ['vouchers', () => vouchers(bench)],
    ['channel', () => channel(bench)],
    ['floor', () => floor(bench, service)],
    ['logging', () => logging(bench, service)],
    ['soak', () => soak(bench, service)],
    ['caps', () => caps(bench)],
    ['instances', () => instances(bench)],
    ['rss', () => memory(bench)],
    ['usage', () => usage(bench, service)],
    ['profile', () => profiles(bench)],
  ];
  for (const [section, run] of sections) {
    if (!bench.options.sections.has(section)) continue;
    // Only one service takes load at a time: the first one idles while the others run.
    await run();
  }
}

/** The goals met or not, and every figure of the run as JSON. */
function writeResults({ options, runId, startedAt, command }: Run, bench: Bench): void {
  if (bench.goals.length > 0) {
    say();
    say('## Goals');
    for (const goal of bench.goals) say(goalLine(goal));
  }
  say();
  say(`load average after the run: ${loadAverage()}`);
  say(`rerun: ${command}   (this run took ${Math.round((Date.now() - startedAt) / 1000)} s)`);
  const jsonFile = options.json ?? path.join(ROOT, '.tmp', 'bench-results', `${runId}.json`);
  mkdirSync(path.dirname(jsonFile), { recursive: true });
  writeFileSync(
    jsonFile,
    JSON.stringify(
      { ...bench.results, goals: bench.goals },
      (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value),
      2,
    ),
  );
  say(`every figure of this run: ${path.relative(ROOT, jsonFile)}`);
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
