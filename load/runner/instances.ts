/**
 * Several instances on one Postgres (load/several-instances.js is the k6 form): two API instances
 * (`server/main.ts` with RUN_WORKER=false) and one worker (`--worker-only`) in child processes,
 * all on one DATABASE_URL, behind the round robin of load/runner/roundRobin.ts. Used by
 * `npm run bench -- --only instances` and by test/load/several-instances.test.ts.
 *
 * Three runs, every request through the balancer:
 * - caps: FACTOR x CAP clients per instance on /proxy to the target's /hold route. Each admitted
 *   call waits at the target; a refused client tries again after a pause. Once the duration is
 *   over and every instance's cap's worth waits, the clients stop sending, the target is
 *   released, and the balancer's count of answers per instance gives admitted (200) and refused
 *   (429). Each instance's GET /metrics, polled throughout, gives its own view:
 *   prs_requests_in_flight{group="proxy"} never above its cap, and prs_cap_refusals_total's
 *   increase equal to the 429s it sent.
 * - credits: M paid /proxy calls at once against credits for exactly K: exactly K paid (200),
 *   the others 402; once every payment is settled, the ledger, the balance and the proxy
 *   payments agree to the credit, and the target was paid exactly K times.
 * - limit: M paid calls at once with an API key whose daily cap allows exactly L: exactly L paid,
 *   the others 429 spend_limit_exceeded; the key's daily counter is exactly L calls' credits.
 */
import path from 'node:path';
import { createDb, type Db } from '../../db/index';
import { createApiKey, createOrganisation } from '../../payments/accounts/accounts';
import { utcDay } from '../../payments/basics/clock';
import { grantCredits, organisationBalance } from '../../payments/accounts/credits';
import type { LoadRequest } from './autocannon';
import type { HoldControl } from './caps';
import { problemsOf429 } from './checks';
import { freePort, spawnChild, type Child } from './children';
import { startRoundRobin, UPSTREAM_HEADER, type RoundRobin } from './roundRobin';
import { startServiceChild, type ServiceChild } from './serviceChild';

/** One answer as the runner received it (the test checks each against the OpenAPI document). */
export interface Exchange {
  method: string;
  /** Path and query, as sent. */
  path: string;
  status: number;
  headers: Headers;
  text: string;
}

export type Observe = (exchange: Exchange) => void;

export interface Cluster {
  balancer: RoundRobin;
  instances: ServiceChild[];
  worker: Child;
  databaseUrl: string;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** Scratch directory for the children's logs (DATA_DIR). */
  dataDir: string;
  databaseUrl: string;
  /** The environment every process shares (peers, caps, log level); DATABASE_URL is added. */
  env: Record<string, string>;
  instances?: number;
  /** Core to pin the service processes to (taskset), when pinning is available. */
  core?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Two API instances (RUN_WORKER=false) and one worker on one Postgres, behind a round robin. */
export async function startCluster(options: ClusterOptions): Promise<Cluster> {
  const env = { ...options.env, DATABASE_URL: options.databaseUrl, SHUTDOWN_GRACE_MS: '2000' };
  const instances: ServiceChild[] = [];
  let worker: Child | undefined;
  let balancer: RoundRobin | undefined;
  const stop = async () => {
    await balancer?.close();
    await Promise.all([...instances.map((instance) => instance.stop()), worker?.stop(15_000)]);
  };
  try {
    // The first start runs the migrations; the others find them done.
    instances.push(
      await startServiceChild({
        name: 'instance-1',
        core: options.core,
        dataDir: options.dataDir,
        env: { ...env, RUN_WORKER: 'false' },
      }),
    );
    const rest = await Promise.all(
      Array.from({ length: (options.instances ?? 2) - 1 }, (_, index) =>
        startServiceChild({
          name: `instance-${index + 2}`,
          core: options.core,
          dataDir: options.dataDir,
          env: { ...env, RUN_WORKER: 'false' },
        }),
      ),
    );
    instances.push(...rest);
    worker = await startWorker(options, env);
    balancer = await startRoundRobin(instances.map((instance) => instance.url));
    return { balancer, instances, worker, databaseUrl: options.databaseUrl, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** `npm run worker`'s process; ready once its probe port answers GET /health/ready. */
async function startWorker(options: ClusterOptions, env: Record<string, string>): Promise<Child> {
  const port = await freePort();
  const worker = await spawnChild({
    name: 'worker',
    core: options.core,
    script: 'server/main.ts',
    args: ['--worker-only'],
    env: { ...env, WORKER_PORT: String(port), HOST: '127.0.0.1', DATA_DIR: options.dataDir },
    echoStderr: true,
    stdoutFile: path.join(options.dataDir, 'worker.log'),
  });
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (worker.process.exitCode !== null) throw new Error(`the worker exited:\n${worker.output()}`);
    try {
      const response = await fetch(`http://127.0.0.1:${port}/health/ready`, { signal: AbortSignal.timeout(2_000) });
      await response.text();
      if (response.status === 200) return worker;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await worker.stop(2_000);
      throw new Error(`the worker was not ready in time:\n${worker.output()}`);
    }
    await sleep(200);
  }
}

// --- requests -----------------------------------------------------------------------------

async function send(baseUrl: string, request: LoadRequest, observe: Observe | undefined): Promise<Exchange> {
  const response = await fetch(new URL(request.path, baseUrl), {
    method: request.method,
    headers: {
      ...(request.headers ?? {}),
      ...(request.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: request.body,
    redirect: 'manual',
  });
  const exchange: Exchange = {
    method: request.method,
    path: request.path,
    status: response.status,
    headers: response.headers,
    text: await response.text(),
  };
  observe?.(exchange);
  return exchange;
}

/** An instance's GET /metrics as {'name{labels}': value}. */
export async function instanceMetrics(url: string, observe?: Observe): Promise<Record<string, number>> {
  const exchange = await send(url, { method: 'GET', path: '/metrics' }, observe);
  if (exchange.status !== 200) throw new Error(`GET ${url}/metrics answered ${exchange.status}`);
  const series: Record<string, number> = {};
  for (const line of exchange.text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    series[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return series;
}

const IN_FLIGHT = 'prs_requests_in_flight{group="proxy"}';
const REFUSALS = 'prs_cap_refusals_total{group="proxy"}';
const PAID = 'prs_paid_calls_total{mode="proxy",result="paid"}';
const PENDING = 'prs_paid_calls_total{mode="proxy",result="pending"}';

// --- caps ---------------------------------------------------------------------------------

export interface InstanceCaps {
  upstream: string;
  cap: number;
  /** Answered 200 through the balancer (each was held at the target for the whole run). */
  admitted: number;
  /** Answered 429 through the balancer. */
  refused: number;
  /** Any other answer: must be 0. */
  other: number;
  /** The most prs_requests_in_flight{group="proxy"} the instance's /metrics showed. */
  maxInFlight: number;
  /** prs_cap_refusals_total{group="proxy"}'s increase over the run: equals `refused`. */
  serverRefused: number;
  /** 429s without Retry-After or the documented body. */
  bad429: number;
}

export interface CapsAcross {
  cap: number;
  clients: number;
  instances: InstanceCaps[];
  /** Requests that waited at the target at once (all instances): at most instances x cap. */
  maxWaitingAtTarget: number;
  metricsPolls: number;
  bad429Samples: string[];
}

export interface CapsRun {
  cluster: Pick<Cluster, 'balancer' | 'instances'>;
  cap: number;
  /** Clients per instance, as a multiple of its cap. */
  factor: number;
  durationS: number;
  /** The proxyHold request of load/scenarios.json. */
  request: LoadRequest;
  target: HoldControl;
  pauseMs?: number;
  observe?: Observe;
}

export async function capsAcrossInstances(run: CapsRun): Promise<CapsAcross> {
  const { balancer, instances } = run.cluster;
  const cap = run.cap;
  const clients = instances.length * run.factor * cap;
  await run.target.release();
  await run.target.reset();
  balancer.resetCounts();
  const before = await Promise.all(instances.map((instance) => instanceMetrics(instance.url, run.observe)));
  const maxInFlight = instances.map(() => 0);
  let polls = 0;
  const polling = { on: true };
  const poller = (async () => {
    while (polling.on) {
      const all = await Promise.all(instances.map((instance) => instanceMetrics(instance.url, run.observe)));
      all.forEach((series, index) => {
        maxInFlight[index] = Math.max(maxInFlight[index] ?? 0, series[IN_FLIGHT] ?? 0);
      });
      polls += 1;
      await sleep(20);
    }
  })();

  const state = { sending: true, alive: clients };
  const bad429: string[] = [];
  let bad429Count = 0;
  const client = async () => {
    try {
      while (state.sending) {
        const exchange = await send(balancer.url, run.request, run.observe);
        if (exchange.status !== 429) return;
        const headers: Record<string, string> = {};
        exchange.headers.forEach((value, name) => {
          headers[name] = value;
        });
        const problems = problemsOf429(exchange.text, headers, cap);
        if (problems.length > 0) {
          bad429Count += 1;
          if (bad429.length < 5) bad429.push(problems.join('; '));
        }
        await sleep(run.pauseMs ?? 5);
      }
    } finally {
      state.alive -= 1;
    }
  };
  const startedAt = Date.now();
  const running = Array.from({ length: clients }, client);
  const full = instances.length * cap;
  const graceMs = 15_000;
  while (Date.now() - startedAt < run.durationS * 1000 || (await run.target.stats()).waiting < full) {
    if (Date.now() - startedAt > run.durationS * 1000 + graceMs) break;
    await sleep(25);
  }
  // No new requests; those on their way end as 429 or wait at the target with the others.
  state.sending = false;
  const settleBy = Date.now() + 10_000;
  while ((await run.target.stats()).waiting < state.alive && Date.now() < settleBy) await sleep(20);
  const atPeak = await run.target.stats();
  await run.target.release();
  await Promise.all(running);
  polling.on = false;
  await poller;
  const after = await Promise.all(instances.map((instance) => instanceMetrics(instance.url, run.observe)));
  const counts = balancer.counts();
  return {
    cap,
    clients,
    maxWaitingAtTarget: atPeak.maxWaiting,
    metricsPolls: polls,
    bad429Samples: bad429,
    instances: counts.map((count, index) => {
      const admitted = count.byStatus['200'] ?? 0;
      const refused = count.byStatus['429'] ?? 0;
      return {
        upstream: count.upstream,
        cap,
        admitted,
        refused,
        other: count.forwarded - admitted - refused,
        maxInFlight: maxInFlight[index] ?? 0,
        serverRefused: (after[index]?.[REFUSALS] ?? 0) - (before[index]?.[REFUSALS] ?? 0),
        bad429: index === 0 ? bad429Count : 0,
      };
    }),
  };
}

/** What must hold of a caps run; empty when it all does. */
export function capsProblems(report: CapsAcross): string[] {
  const problems: string[] = [];
  for (const instance of report.instances) {
    const name = `instance ${instance.upstream}`;
    if (instance.admitted > report.cap) problems.push(`${name} admitted ${instance.admitted} (cap ${report.cap})`);
    if (instance.admitted < report.cap)
      problems.push(`${name} admitted only ${instance.admitted} of its cap ${report.cap}`);
    if (instance.maxInFlight > report.cap)
      problems.push(`${name}'s /metrics showed ${instance.maxInFlight} in flight (cap ${report.cap})`);
    if (instance.refused === 0) problems.push(`${name} refused nothing: the overload did not reach it`);
    if (instance.serverRefused !== instance.refused)
      problems.push(`${name} counted ${instance.serverRefused} refusals, the balancer ${instance.refused}`);
    if (instance.other > 0) problems.push(`${name} gave ${instance.other} answers other than 200 and 429`);
    if (instance.bad429 > 0) problems.push(`${name}: ${instance.bad429} bad 429s: ${report.bad429Samples.join(' | ')}`);
  }
  if (report.maxWaitingAtTarget > report.instances.length * report.cap)
    problems.push(`${report.maxWaitingAtTarget} calls waited at the target at once`);
  return problems;
}

// --- credits and daily limits ---------------------------------------------------------------

export interface PaidAccount {
  organisationId: bigint;
  apiKeyId: bigint;
  key: string;
}

/** An organisation with `credits` and an API key with a daily cap of `dailyCapCredits`. */
export async function seedPaidAccount(db: Db, credits: bigint, dailyCapCredits: bigint): Promise<PaidAccount> {
  const organisation = await createOrganisation(db, 'Several instances');
  if (credits > 0n) await grantCredits(db, organisation.organisationId, credits, 'several instances grant');
  const apiKey = await createApiKey(db, organisation.accountId, dailyCapCredits);
  return { organisationId: organisation.organisationId, apiKeyId: apiKey.apiKeyId, key: apiKey.key };
}

export interface PaidAcross {
  kind: 'credits' | 'limit';
  calls: number;
  /** The number of calls the credits or the daily cap allow. */
  allowed: number;
  creditsPerCall: bigint;
  /** Calls sent again after a 429 of a concurrency cap (more calls at once than the caps admit). */
  capacityRetries: number;
  /** Final answers per instance: {upstream: {status: count}}. */
  byInstance: Record<string, Record<string, number>>;
  paid: number;
  /** 402 insufficient_credits (credits) or 429 spend_limit_exceeded (limit). */
  refused: number;
  other: string[];
  /** prs_paid_calls_total{mode="proxy"} increase per instance: paid as the request ended, and pending (watched by a job). */
  serverPaid: Record<string, { paid: number; pending: number }>;
  ledger: Record<'grant' | 'reserve' | 'charge' | 'release' | 'refund', bigint>;
  balanceBefore: bigint;
  balanceAfter: bigint;
  /** The key's daily counter (api_key scope) after the run. */
  keySpent: bigint;
  dailyCap: bigint;
  paymentStates: Record<string, number>;
  /** Paid requests the target answered 200 during the run (when the runner can see the target). */
  paidAtTarget: number | undefined;
}

export interface PaidRun {
  cluster: Pick<Cluster, 'balancer' | 'instances'>;
  db: Db;
  kind: 'credits' | 'limit';
  account: PaidAccount;
  allowed: number;
  calls: number;
  creditsPerCall: bigint;
  dailyCap: bigint;
  paidUrl: string;
  /** Paid requests the target has answered 200 so far. */
  paidAtTarget?: () => Promise<number>;
  observe?: Observe;
}

async function ledgerOf(db: Db, organisationId: bigint): Promise<PaidAcross['ledger']> {
  const rows = await db
    .selectFrom('credit_ledger')
    .select(['kind', 'amount_credits'])
    .where('organisation_id', '=', organisationId)
    .execute();
  const sums = { grant: 0n, reserve: 0n, charge: 0n, release: 0n, refund: 0n };
  // The runner's accounts are granted their credits; none buys any.
  for (const row of rows) if (row.kind !== 'purchase') sums[row.kind] += row.amount_credits;
  return sums;
}

export async function paidAcrossInstances(run: PaidRun): Promise<PaidAcross> {
  const { balancer, instances } = run.cluster;
  const { db, account } = run;
  const balanceBefore = await organisationBalance(db, account.organisationId);
  const targetBefore = run.paidAtTarget ? await run.paidAtTarget() : undefined;
  const before = await Promise.all(instances.map((instance) => instanceMetrics(instance.url, run.observe)));
  const request: LoadRequest = {
    method: 'POST',
    path: '/proxy',
    headers: { 'x-api-key': account.key },
    body: JSON.stringify({ api_url: run.paidUrl, method: 'GET' }),
  };
  let capacityRetries = 0;
  // A 429 of an instance's cap says nothing about money: sent again after Retry-After, as a client would.
  const call = async (): Promise<Exchange> => {
    for (let attempt = 1; ; attempt += 1) {
      const exchange = await send(balancer.url, request, run.observe);
      if (exchange.status !== 429 || attempt >= 30 || !exchange.text.includes('"capacity_exceeded"')) return exchange;
      capacityRetries += 1;
      await sleep(Number(exchange.headers.get('retry-after') ?? 1) * 1000);
    }
  };
  const exchanges = await Promise.all(Array.from({ length: run.calls }, call));
  const byInstance: Record<string, Record<string, number>> = {};
  let paid = 0;
  let refused = 0;
  const other: string[] = [];
  const refusal =
    run.kind === 'credits'
      ? { status: 402, code: 'insufficient_credits' }
      : { status: 429, code: 'spend_limit_exceeded' };
  for (const exchange of exchanges) {
    const upstream = exchange.headers.get(UPSTREAM_HEADER) ?? 'unknown';
    const statuses = (byInstance[upstream] ??= {});
    statuses[exchange.status] = (statuses[exchange.status] ?? 0) + 1;
    if (exchange.status === 200) paid += 1;
    else if (
      exchange.status === refusal.status &&
      (JSON.parse(exchange.text) as { code?: string }).code === refusal.code
    )
      refused += 1;
    else other.push(`${exchange.status} ${exchange.text.slice(0, 200)}`);
  }
  // A payment the chain had not shown by the end of its request is finished by the worker's job.
  const deadline = Date.now() + 60_000;
  let states: Array<{ state: string }>;
  for (;;) {
    states = await db
      .selectFrom('proxy_payments')
      .select('state')
      .where('organisation_id', '=', account.organisationId)
      .execute();
    if (states.every((row) => row.state === 'charged' || row.state === 'released') || Date.now() > deadline) break;
    await sleep(200);
  }
  const paymentStates: Record<string, number> = {};
  for (const row of states) paymentStates[row.state] = (paymentStates[row.state] ?? 0) + 1;
  const after = await Promise.all(instances.map((instance) => instanceMetrics(instance.url, run.observe)));
  const serverPaid: PaidAcross['serverPaid'] = {};
  instances.forEach((instance, index) => {
    serverPaid[new URL(instance.url).host] = {
      paid: (after[index]?.[PAID] ?? 0) - (before[index]?.[PAID] ?? 0),
      pending: (after[index]?.[PENDING] ?? 0) - (before[index]?.[PENDING] ?? 0),
    };
  });
  const spentRow = await db
    .selectFrom('daily_spend')
    .select('spent_credits')
    .where('scope', '=', 'api_key')
    .where('scope_id', '=', String(account.apiKeyId))
    .where('network_class', '=', 'all')
    .where('day', '=', utcDay(new Date()))
    .executeTakeFirst();
  return {
    kind: run.kind,
    calls: run.calls,
    allowed: run.allowed,
    creditsPerCall: run.creditsPerCall,
    byInstance,
    capacityRetries,
    paid,
    refused,
    other,
    serverPaid,
    ledger: await ledgerOf(db, account.organisationId),
    balanceBefore,
    balanceAfter: await organisationBalance(db, account.organisationId),
    keySpent: spentRow?.spent_credits ?? 0n,
    dailyCap: run.dailyCap,
    paymentStates,
    paidAtTarget:
      targetBefore === undefined || !run.paidAtTarget ? undefined : (await run.paidAtTarget()) - targetBefore,
  };
}

/** What must hold of a paid run; empty when it all does. */
export function paidProblems(report: PaidAcross): string[] {
  const problems: string[] = [];
  const allowed = BigInt(report.allowed);
  const spent = allowed * report.creditsPerCall;
  const expect = (what: string, actual: unknown, expected: unknown) => {
    if (actual !== expected) problems.push(`${what}: ${String(actual)}, expected ${String(expected)}`);
  };
  expect('paid calls', report.paid, report.allowed);
  expect('refused calls', report.refused, report.calls - report.allowed);
  if (report.other.length > 0) problems.push(`other answers: ${report.other.slice(0, 3).join(' | ')}`);
  expect('proxy payments charged', report.paymentStates.charged ?? 0, report.allowed);
  expect(
    'proxy payments in other states',
    Object.keys(report.paymentStates).filter((state) => state !== 'charged').length,
    0,
  );
  expect('ledger charges (credits)', report.ledger.charge, spent);
  expect('ledger reservations less releases (credits)', report.ledger.reserve - report.ledger.release, spent);
  expect('ledger refunds (credits)', report.ledger.refund, 0n);
  expect('balance after (credits)', report.balanceAfter, report.balanceBefore - spent);
  if (report.balanceAfter < 0n) problems.push(`overdraft: the balance is ${report.balanceAfter}`);
  expect("the key's daily counter (credits)", report.keySpent, spent);
  if (report.keySpent > report.dailyCap)
    problems.push(`the key spent ${report.keySpent}, over its daily cap ${report.dailyCap}`);
  const serverPaid = Object.values(report.serverPaid).reduce((sum, counts) => sum + counts.paid + counts.pending, 0);
  expect('paid calls counted by the instances (prs_paid_calls_total)', serverPaid, report.allowed);
  if (report.paidAtTarget !== undefined) expect('paid calls the target answered', report.paidAtTarget, report.allowed);
  return problems;
}

/** The database of a cluster, for seeding and reading (close it when done). */
export function clusterDb(databaseUrl: string) {
  return createDb(databaseUrl, { maxConnections: 2 });
}
