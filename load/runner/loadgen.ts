/**
 * Bench child: the load generator, pinned to its own core. The bench sends it runs over IPC:
 *
 * - autocannon: keep-alive load at full speed or at a fixed overall rate;
 * - clients: N clients of node:http, each one request at a time (closed loop) or paced to a fixed
 *   rate: used for POST 429s, which the service answers with Connection: close (autocannon would
 *   time the next request from before its reconnection);
 * - paid: paid calls, either direct with the unmodified x402-fetch client or through POST /proxy;
 * - open / close: idle keep-alive connections held open (for RSS figures).
 */
import http from 'node:http';
import net from 'node:net';
import { createWalletClient, defineChain, http as viemHttp, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { startAutocannon, type AutocannonRun, type LoadRequest, type RunResult } from './autocannon';
import { problemsOf429 } from './checks';
import { serveChild } from './children';
import { Samples, type LatencySummary } from './stats';

interface Check429 {
  /** The cap the 429 details must name. */
  limit?: number;
}

export interface CheckedResult extends RunResult {
  checked429: number;
  bad429: number;
  bad429Samples: string[];
}

function checker(check: Check429 | undefined) {
  const state = { checked: 0, bad: 0, samples: [] as string[] };
  const inspect = (status: number, body: string, headers: Record<string, unknown>) => {
    if (!check || status !== 429) return;
    state.checked += 1;
    const problems = problemsOf429(body, headers, check.limit);
    if (problems.length > 0) {
      state.bad += 1;
      if (state.samples.length < 5) state.samples.push(problems.join('; '));
    }
  };
  return { state, inspect };
}

/** How to end the runs under way early (the bench's `stop` call). */
const stoppers = new Set<() => void>();

async function autocannonRun(message: { run: Omit<AutocannonRun, 'onResponse'>; check429?: Check429 }): Promise<CheckedResult> {
  const { state, inspect } = checker(message.check429);
  // autocannon hands over header names as the server wrote them; node:http's are lower case.
  const onResponse = (status: number, body: string, headers: Record<string, unknown>) =>
    inspect(status, body, Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value])));
  const running = startAutocannon({ ...message.run, ...(message.check429 ? { onResponse } : {}) });
  stoppers.add(running.stop);
  try {
    const result = await running.done;
    return { ...result, checked429: state.checked, bad429: state.bad, bad429Samples: state.samples };
  } finally {
    stoppers.delete(running.stop);
  }
}

interface ClientsRun {
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

async function clientsRun(run: ClientsRun): Promise<ClientsResult> {
  const mix = run.mix ?? [{ name: 'request', request: run.request!, weight: 1 }];
  const totalWeight = mix.reduce((sum, entry) => sum + entry.weight, 0);
  const prepared = mix.map((entry) => {
    const body = entry.request.body === undefined ? undefined : Buffer.from(entry.request.body);
    return {
      ...entry,
      url: new URL(entry.request.path, run.baseUrl),
      body,
      headers: {
        ...(body ? { 'content-type': 'application/json', 'content-length': String(body.length) } : {}),
        ...entry.request.headers,
      } as Record<string, string>,
      samples: new Samples(),
      statuses: {} as Record<string, number>,
    };
  });
  const pick = random(7);
  const choose = () => {
    let point = pick() * totalWeight;
    for (const entry of prepared) {
      point -= entry.weight;
      if (point < 0) return entry;
    }
    return prepared[prepared.length - 1]!;
  };
  const all = new Samples();
  const byStatus = new Map<number, Samples>();
  const { state, inspect } = checker(run.check429);
  let errors = 0;
  let cut = 0;
  let ended = false;
  const inFlight = new Set<http.ClientRequest>();
  const startedAt = performance.now();
  const endAt = startedAt + run.durationS * 1000;
  const intervalMs = run.ratePerSecond ? (run.clients * 1000) / run.ratePerSecond : 0;
  // At the end, requests still waiting (held open by the service or a target) are cut.
  let endedAt = endAt;
  const end = () => {
    if (ended) return;
    ended = true;
    endedAt = Math.min(endAt, performance.now());
    for (const request of inFlight) request.destroy();
  };
  const endTimer = setTimeout(end, run.durationS * 1000);
  stoppers.add(end);

  const once = (agent: http.Agent) =>
    new Promise<void>((resolve) => {
      const entry = choose();
      const sentAt = performance.now();
      const request = http.request(entry.url, { method: entry.request.method, headers: entry.headers, agent }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          inFlight.delete(request);
          const elapsed = performance.now() - sentAt;
          const status = response.statusCode ?? 0;
          all.add(elapsed);
          entry.samples.add(elapsed);
          entry.statuses[status] = (entry.statuses[status] ?? 0) + 1;
          let samples = byStatus.get(status);
          if (!samples) byStatus.set(status, (samples = new Samples()));
          samples.add(elapsed);
          inspect(status, Buffer.concat(chunks).toString('utf8'), response.headers);
          resolve();
        });
        response.on('error', () => undefined);
        response.on('close', () => {
          if (!inFlight.delete(request)) return;
          if (ended) cut += 1;
          else errors += 1;
          resolve();
        });
      });
      inFlight.add(request);
      request.on('error', () => {
        if (!inFlight.delete(request)) return;
        if (ended) cut += 1;
        else errors += 1;
        resolve();
      });
      request.end(entry.body);
    });

  const client = async (index: number) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    // Paced clients start spread over one interval, so that the overall rate is even.
    let next = startedAt + (intervalMs * index) / run.clients;
    try {
      while (!ended && performance.now() < endAt) {
        if (intervalMs > 0) {
          const wait = next - performance.now();
          if (wait > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(wait, endAt - performance.now())));
          if (ended || performance.now() >= endAt) break;
          next += intervalMs;
        }
        await once(agent);
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
  for (const [status, samples] of byStatus) summaries[status] = samples.summary();
  return {
    responses: all.count,
    durationS,
    rps: all.count / durationS,
    latency: all.summary(),
    byStatus: summaries,
    errors,
    timeouts: 0,
    cut,
    checked429: state.checked,
    bad429: state.bad,
    bad429Samples: state.samples,
    byRequest: Object.fromEntries(prepared.map((entry) => [entry.name, { ...entry.samples.summary(), statuses: entry.statuses }])),
  };
}

interface PaidRun {
  mode: 'direct' | 'proxy';
  /** direct: the paid route of the target; proxy: the service's base URL. */
  url: string;
  targetUrl: string;
  apiKey?: string;
  rpcUrl: string;
  chainId: number;
  clientEvmPrivateKey: Hex;
  count: number;
  concurrency: number;
}

let payingFetch: { key: string; fetch: typeof fetch } | undefined;

async function paidFetch(run: PaidRun): Promise<typeof fetch> {
  const key = `${run.rpcUrl} ${run.clientEvmPrivateKey}`;
  if (payingFetch?.key === key) return payingFetch.fetch;
  const { wrapFetchWithPayment } = await import('x402-fetch');
  const chain = defineChain({
    id: run.chainId,
    name: 'base-sepolia',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [run.rpcUrl] } },
  });
  const wallet = createWalletClient({ account: privateKeyToAccount(run.clientEvmPrivateKey), chain, transport: viemHttp(run.rpcUrl) });
  payingFetch = { key, fetch: wrapFetchWithPayment(fetch, wallet as never, 1_000_000n) as typeof fetch };
  return payingFetch.fetch;
}

export interface PaidResult extends RunResult {
  failures: string[];
  /** Wall-clock start and end of each call, in milliseconds (for timelines against the target's records). */
  calls: Array<[number, number]>;
}

const wallClock = () => performance.timeOrigin + performance.now();

async function paidRun(run: PaidRun): Promise<PaidResult> {
  const pay = run.mode === 'direct' ? await paidFetch(run) : undefined;
  const all = new Samples();
  const byStatus = new Map<number, Samples>();
  const failures: string[] = [];
  const calls: Array<[number, number]> = [];
  let errors = 0;
  let issued = 0;
  const startedAt = performance.now();
  const one = async () => {
    const sentAt = performance.now();
    const startedWall = wallClock();
    let status = 0;
    try {
      const response =
        run.mode === 'direct'
          ? await pay!(run.targetUrl)
          : await fetch(new URL('/proxy', run.url), {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'x-api-key': run.apiKey! },
              body: JSON.stringify({ api_url: run.targetUrl, method: 'GET' }),
            });
      const text = await response.text();
      status = response.status;
      if (status !== 200 && failures.length < 5) failures.push(`${status} ${text.slice(0, 200)}`);
    } catch (error) {
      errors += 1;
      if (failures.length < 5) failures.push(String(error));
      return;
    }
    const elapsed = performance.now() - sentAt;
    if (calls.length < 10_000) calls.push([startedWall, wallClock()]);
    all.add(elapsed);
    let samples = byStatus.get(status);
    if (!samples) byStatus.set(status, (samples = new Samples()));
    samples.add(elapsed);
  };
  const worker = async () => {
    while (issued < run.count) {
      issued += 1;
      await one();
    }
  };
  await Promise.all(Array.from({ length: run.concurrency }, worker));
  const durationS = (performance.now() - startedAt) / 1000;
  const summaries: Record<string, LatencySummary> = {};
  for (const [status, samples] of byStatus) summaries[status] = samples.summary();
  return { responses: all.count, durationS, rps: all.count / durationS, latency: all.summary(), byStatus: summaries, errors, timeouts: 0, failures, calls };
}

const openSockets: net.Socket[] = [];

/** Opens `count` connections, each answered once (GET path) and then left open and idle. */
async function openConnections(message: { baseUrl: string; count: number; path: string }): Promise<{ open: number; failed: number }> {
  const url = new URL(message.path, message.baseUrl);
  let failed = 0;
  const openOne = () =>
    new Promise<void>((resolve) => {
      const socket = net.connect(Number(url.port), url.hostname);
      let answered = false;
      socket.setTimeout(10_000, () => {
        if (answered) return;
        failed += 1;
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        if (!answered) failed += 1;
        resolve();
      });
      socket.on('data', () => {
        if (answered) return;
        answered = true;
        socket.setTimeout(0);
        openSockets.push(socket);
        resolve();
      });
      socket.write(`GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nConnection: keep-alive\r\n\r\n`);
    });
  for (let start = 0; start < message.count; start += 50) {
    await Promise.all(Array.from({ length: Math.min(50, message.count - start) }, openOne));
  }
  return { open: openSockets.filter((socket) => !socket.destroyed).length, failed };
}

function closeConnections(): { closed: number } {
  const closed = openSockets.length;
  for (const socket of openSockets.splice(0)) socket.destroy();
  return { closed };
}

serveChild(
  {
    autocannon: (message) => autocannonRun(message),
    clients: (message) => clientsRun(message.run),
    paid: (message) => paidRun(message.run),
    open: (message) => openConnections(message),
    stop: () => {
      for (const stop of stoppers) stop();
      return { stopped: stoppers.size };
    },
    close: () => closeConnections(),
  },
  { pid: process.pid },
  async () => {
    closeConnections();
  },
);
