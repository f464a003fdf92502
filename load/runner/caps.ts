/**
 * The caps scenario of the Node runner (load/caps.js is its k6 form): concurrency well past a
 * group's cap, with the cap's worth of requests held open, counting what gets through.
 *
 * - heldBy "target" (/proxy, /relay): every request names the target's /hold route; each admitted
 *   request reaches the target and waits there, so the target's count of arrivals is the number
 *   of requests the service admitted. Exactly `cap` may arrive; the surplus must be 429.
 * - heldBy "client" (/webhooks, answered at once): `cap` requests are held open by their own
 *   clients (headers sent, body unfinished), then the surplus must all be 429.
 *
 * The load lasts the scenario's duration, and for target-held groups at least until the cap's
 * worth of requests waits at the target (the held requests are never answered during it). The
 * target's counts are read then, while every client is still connected, and the load is stopped.
 * When it stops its clients disconnect: the service frees their slots at once, and requests
 * already on their way in may then be admitted and reach the target although their clients are
 * gone; those are reported apart (lateArrivals). Afterwards every held request is released and
 * the service must come back to 0 active.
 */
import type { LoadRequest, RunResult } from './autocannon';
import type { CapGroup } from './scenarios';

export interface HoldStats {
  arrivals: number;
  waiting: number;
  maxWaiting: number;
}

export interface HoldControl {
  reset(): Promise<unknown>;
  stats(): Promise<HoldStats>;
  release(): Promise<unknown>;
}

export interface ClientHolds {
  /** Resolves once `count` requests are held open (admitted by the service). */
  hold(count: number): Promise<void>;
  /** Releases them; resolves with their statuses. */
  release(): Promise<number[]>;
}

export interface RunningLoad {
  done: Promise<LoadResult>;
  stop(): void;
}

export interface LoadResult extends RunResult {
  checked429: number;
  bad429: number;
  bad429Samples: string[];
}

export interface CapsScenario {
  group: CapGroup;
  cap: number;
  /** Total concurrency as a multiple of the cap. */
  factor: number;
  durationS: number;
  request: LoadRequest;
  heldBy: 'target' | 'client';
  target?: HoldControl;
  clients?: ClientHolds;
  /** Starts the load (connections, at most maxDurationS); stop() ends it early. */
  load(connections: number, maxDurationS: number): RunningLoad;
  /** The group's active count from GET /metrics/rate-limits. */
  active(): Promise<number>;
}

export interface CapsReport {
  group: CapGroup;
  cap: number;
  concurrency: number;
  /** Requests the service let through during the overload (target arrivals, or held clients). */
  admitted: number;
  /** Most requests waiting at the target at once (target-held groups). */
  maxWaiting: number | undefined;
  /** Admitted beyond the cap while the clients were connected: must be 0. */
  overCap: number;
  /** Requests that reached the target after the load's clients had disconnected (target-held groups). */
  lateArrivals: number | undefined;
  /** The most requests waiting at the target at once, teardown included (target-held groups). */
  maxWaitingWithTeardown: number | undefined;
  load: LoadResult;
  /** Answers other than 429 during the overload: must be 0 (admitted requests are all held). */
  notRefused: number;
  heldStatuses: number[];
  activeAfter: number;
}

async function waitForActive(scenario: CapsScenario, expected: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let active = await scenario.active();
  while (active !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    active = await scenario.active();
  }
  return active;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Releases what waits at the target until nothing has waited for a while (at most 5 s). */
async function drain(target: HoldControl): Promise<void> {
  const deadline = Date.now() + 5_000;
  let quiet = 0;
  while (quiet < 3 && Date.now() < deadline) {
    await target.release();
    await sleep(50);
    quiet = (await target.stats()).waiting === 0 ? quiet + 1 : 0;
  }
}

/** Longest wait, past the scenario's duration, for the cap's worth of requests to reach the target. */
const ARRIVAL_GRACE_MS = 10_000;

export async function runCapsScenario(scenario: CapsScenario): Promise<CapsReport> {
  const concurrency = scenario.factor * scenario.cap;
  let admitted: number;
  let maxWaiting: number | undefined;
  let lateArrivals: number | undefined;
  let maxWaitingWithTeardown: number | undefined;
  let load: LoadResult;
  let heldStatuses: number[] = [];
  if (scenario.heldBy === 'target') {
    const target = scenario.target;
    if (!target) throw new Error(`the ${scenario.group} scenario is held by the target but has no target`);
    await drain(target);
    await target.reset();
    // Cleared when the load ends (a property: TypeScript would narrow a local flag to `true`).
    const progress = { loading: true };
    const startedAt = Date.now();
    const running = scenario.load(concurrency, scenario.durationS + ARRIVAL_GRACE_MS / 1000 + 5);
    const done = running.done.finally(() => {
      progress.loading = false;
    });
    // The overload lasts the scenario's duration, and at least until the cap's worth of requests
    // waits at the target (under a flood of 429s the admitted ones may take a while to get there).
    let during = await target.stats();
    while (
      progress.loading &&
      (Date.now() - startedAt < scenario.durationS * 1000 || during.waiting < scenario.cap) &&
      Date.now() - startedAt < scenario.durationS * 1000 + ARRIVAL_GRACE_MS
    ) {
      await sleep(25);
      during = await target.stats();
    }
    if (!progress.loading)
      throw new Error('the load ended before the target was read: the counts would include its teardown');
    running.stop();
    load = await done;
    // Requests already on their way when the clients left arrive within this.
    await sleep(300);
    const after = await target.stats();
    admitted = during.arrivals;
    maxWaiting = during.maxWaiting;
    lateArrivals = after.arrivals - during.arrivals;
    maxWaitingWithTeardown = after.maxWaiting;
    await drain(target);
  } else {
    const clients = scenario.clients;
    if (!clients) throw new Error(`the ${scenario.group} scenario is held by its clients but has no clients`);
    await clients.hold(scenario.cap);
    admitted = await scenario.active();
    load = await scenario.load(concurrency - scenario.cap, scenario.durationS).done;
    heldStatuses = await clients.release();
  }
  const activeAfter = await waitForActive(scenario, 0, 10_000);
  const refused = Math.round(load.byStatus['429']?.count ?? 0);
  return {
    group: scenario.group,
    cap: scenario.cap,
    concurrency,
    admitted,
    maxWaiting,
    overCap: Math.max(0, admitted - scenario.cap, (maxWaiting ?? 0) - scenario.cap),
    lateArrivals,
    maxWaitingWithTeardown,
    load,
    notRefused: load.responses - refused,
    heldStatuses,
    activeAfter,
  };
}

export interface DisconnectScenario {
  cap: number;
  target: HoldControl;
  /** Sends one request that the target holds; abort() drops its connection. */
  send(): { abort(): void };
  active(): Promise<number>;
}

export interface DisconnectReport {
  cap: number;
  /** Service's active count once the first wave's clients were gone. */
  activeAfterDisconnect: number;
  /** Requests waiting at the target at once after a second wave of `cap` requests. */
  waitingAtTarget: number;
}

/**
 * What a client disconnect does to a cap: `cap` requests are held at the target, their clients
 * disconnect, then `cap` more are sent. The service frees a slot when its client goes away; if
 * the call to the target goes on, the target ends up with more than the cap in flight.
 */
export async function runDisconnectScenario(scenario: DisconnectScenario): Promise<DisconnectReport> {
  const { cap, target } = scenario;
  const waitUntil = async (check: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check()) && Date.now() < deadline) await sleep(20);
  };
  await drain(target);
  await target.reset();
  const first = Array.from({ length: cap }, () => scenario.send());
  await waitUntil(async () => (await target.stats()).waiting >= cap, 5_000);
  for (const request of first) request.abort();
  await waitUntil(async () => (await scenario.active()) === 0, 5_000);
  const activeAfterDisconnect = await scenario.active();
  const second = Array.from({ length: cap }, () => scenario.send());
  await waitUntil(async () => (await target.stats()).waiting >= 2 * cap, 3_000);
  const waitingAtTarget = (await target.stats()).waiting;
  for (const request of second) request.abort();
  await drain(target);
  await waitUntil(async () => (await scenario.active()) === 0, 5_000);
  return { cap, activeAfterDisconnect, waitingAtTarget };
}
