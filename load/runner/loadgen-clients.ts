/**
 * The load generator's clients run: N clients of node:http, each one request at a time (closed
 * loop) or paced to a fixed rate, over one request or a weighted mix.
 */
import http from 'node:http';
import type { LoadRequest } from './autocannon';
import { itemAt } from './checked';
import { checker, type Check429, type CheckedResult } from './checks';
import { Samples, type LatencySummary } from './stats';

export interface ClientsRun {
  baseUrl: string;
  /** One request, or a weighted mix (each request picked at random by weight). */
  request?: LoadRequest;
  mix?: Array<{ name: string; request: LoadRequest; weight: number }>;
  clients: number;
  durationS: number;
  /** Requests per second over all clients; unset: each client sends its next request as soon as it has an answer. */
  ratePerSecond?: number;
  check429?: Check429;
}

export interface ClientsResult extends CheckedResult {
  /** Requests still unanswered when the run ended (held by the service or a target); cut then. */
  cut: number;
  byRequest: Record<string, LatencySummary & { statuses: Record<string, number> }>;
}

/** A small deterministic generator (mulberry32), so that a mix is the same from run to run. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let value = state;
    value = Math.imul(value ^ (value >>> 15), value | 1);
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61);
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296;
  };
}

/** A request of the mix ready to send, with its own tallies. */
interface MixEntry {
  name: string;
  request: LoadRequest;
  weight: number;
  url: URL;
  body: Buffer | undefined;
  headers: Record<string, string>;
  samples: Samples;
  statuses: Record<string, number>;
}

/** The mix's requests ready to send, each with its own tallies, and a weighted pick among them. */
function prepareMix(run: ClientsRun) {
  const mix = run.mix ?? (run.request ? [{ name: 'request', request: run.request, weight: 1 }] : undefined);
  if (!mix) throw new Error('a clients run needs a request or a mix');
  const totalWeight = mix.reduce((sum, entry) => sum + entry.weight, 0);
  const prepared = mix.map((entry): MixEntry => {
    const body = entry.request.body === undefined ? undefined : Buffer.from(entry.request.body);
    return {
      ...entry,
      url: new URL(entry.request.path, run.baseUrl),
      body,
      headers: {
        ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}),
        ...entry.request.headers,
      },
      samples: new Samples(),
      statuses: {},
    };
  });
  const pick = random(7);
  const choose = () => {
    let point = pick() * totalWeight;
    for (const entry of prepared) {
      point -= entry.weight;
      if (point < 0) return entry;
    }
    return itemAt(prepared, prepared.length - 1, 'the mix');
  };
  return { prepared, choose };
}

/** What the clients of one run share: the tallies, the requests in flight, and whether the run has ended. */
interface RunState {
  all: Samples;
  byStatus: Map<number, Samples>;
  inspect: ReturnType<typeof checker>['inspect'];
  inFlight: Set<http.ClientRequest>;
  ended: boolean;
  errors: number;
  cut: number;
}

/** Sends one request and tallies its answer; one that fails after the end of the run counts as cut. */
function sendOne(state: RunState, entry: MixEntry, agent: http.Agent): Promise<void> {
  return new Promise<void>((resolve) => {
    const sentAt = performance.now();
    const request = http.request(
      entry.url,
      { method: entry.request.method, headers: entry.headers, agent },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          state.inFlight.delete(request);
          const elapsed = performance.now() - sentAt;
          const status = response.statusCode ?? 0;
          state.all.add(elapsed);
          entry.samples.add(elapsed);
          entry.statuses[status] = (entry.statuses[status] ?? 0) + 1;
          let samples = state.byStatus.get(status);
          if (!samples) state.byStatus.set(status, (samples = new Samples()));
          samples.add(elapsed);
          state.inspect(status, Buffer.concat(chunks).toString('utf8'), response.headers);
          resolve();
        });
        response.on('error', () => undefined);
        response.on('close', () => {
          if (!state.inFlight.delete(request)) return;
          if (state.ended) state.cut += 1;
          else state.errors += 1;
          resolve();
        });
      },
    );
    state.inFlight.add(request);
    request.on('error', () => {
      if (!state.inFlight.delete(request)) return;
      if (state.ended) state.cut += 1;
      else state.errors += 1;
      resolve();
    });
    request.end(entry.body);
  });
}

/** Runs the clients for the run's duration; `stoppers` holds how to end it early. */
export async function clientsRun(run: ClientsRun, stoppers: Set<() => void>): Promise<ClientsResult> {
  const { prepared, choose } = prepareMix(run);
  const checked = checker(run.check429);
  const state: RunState = {
    all: new Samples(),
    byStatus: new Map(),
    inspect: checked.inspect,
    inFlight: new Set(),
    ended: false,
    errors: 0,
    cut: 0,
  };
  const startedAt = performance.now();
  const endAt = startedAt + run.durationS * 1000;
  const intervalMs = run.ratePerSecond ? (run.clients * 1000) / run.ratePerSecond : 0;
  // At the end, requests still waiting (held open by the service or a target) are cut.
  let endedAt = endAt;
  const end = () => {
    if (state.ended) return;
    state.ended = true;
    endedAt = Math.min(endAt, performance.now());
    for (const request of state.inFlight) request.destroy();
  };
  const endTimer = setTimeout(end, run.durationS * 1000);
  stoppers.add(end);

  // A function, so that the check after a wait reads state.ended again (TypeScript would keep it narrowed).
  const running = () => !state.ended && performance.now() < endAt;
  const client = async (index: number) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    // Paced clients start spread over one interval, so that the overall rate is even.
    let next = startedAt + (intervalMs * index) / run.clients;
    try {
      while (running()) {
        if (intervalMs > 0) {
          const wait = next - performance.now();
          if (wait > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(wait, endAt - performance.now())));
          if (!running()) break;
          next += intervalMs;
        }
        await sendOne(state, choose(), agent);
      }
    } finally {
      agent.destroy();
    }
  };
  await Promise.all(Array.from({ length: run.clients }, (_, index) => client(index)));
  clearTimeout(endTimer);
  stoppers.delete(end);
  const durationS = (Math.min(performance.now(), endedAt) - startedAt) / 1000;
  const summaries: Record<string, LatencySummary> = {};
  for (const [status, samples] of state.byStatus) summaries[status] = samples.summary();
  return {
    responses: state.all.count,
    durationS,
    rps: state.all.count / durationS,
    latency: state.all.summary(),
    byStatus: summaries,
    errors: state.errors,
    timeouts: 0,
    cut: state.cut,
    checked429: checked.state.checked,
    bad429: checked.state.bad,
    bad429Samples: checked.state.samples,
    byRequest: Object.fromEntries(
      prepared.map((entry) => [entry.name, { ...entry.samples.summary(), statuses: entry.statuses }]),
    ),
  };
}
