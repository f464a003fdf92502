/**
 * Liveness and readiness of one process, answered by GET /health/live and GET /health/ready of
 * the API, and by the small HTTP server `npm run worker` opens on WORKER_PORT (with /metrics).
 *
 * - live: the process answers and its event loop is not stalled: the longest event-loop delay
 *   measured over the last window (or a sampling tick overdue now) stays under the bound.
 * - ready: each check answers within a short bound: the database, the job worker when this
 *   process runs one, and the JSON-RPC endpoint of every enabled network.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { LiveReport, ProbeReports, ReadyReport } from '../handlers/deps';

/** An event loop delayed longer than this is reported as stalled (503 on /health/live). */
export const DEFAULT_LIVE_MAX_DELAY_MS = 2_000;
/** Each readiness check answers within this, or counts as failed. */
export const READY_CHECK_TIMEOUT_MS = 2_000;
/** The delay is measured over windows of this length. */
const WINDOW_MS = 1_000;
/**
 * A heartbeat this often: a beat overdue is a block seen at once, even before the histogram's own
 * timer has fired to record it (a request handled right after the block would otherwise miss it).
 * The histogram samples at the same pace, so both wake the loop together. Each wake-up costs CPU
 * while the process is idle (at 50 ms beats and 10 ms samples, about 7 ms of CPU a second here,
 * 5 ms more than at 250 ms); a quarter of a second is fine enough for a bound of seconds.
 */
export const EVENT_LOOP_SAMPLE_MS = 250;

export type { LiveReport, ReadyReport };

export interface Probes extends ProbeReports {
  /** The process has started: the delays of its start (compiling, migrating) are forgotten. */
  started(): void;
  stop(): void;
}

/**
 * Samples the event loop's delay: a histogram (monitorEventLoopDelay) read and reset once per
 * window, and the time since the last window's tick (a tick overdue means the loop was blocked
 * until just now).
 */
class EventLoopMonitor {
  private readonly histogram: IntervalHistogram = monitorEventLoopDelay({ resolution: EVENT_LOOP_SAMPLE_MS });
  private readonly timer: NodeJS.Timeout;
  private readonly heartbeat: NodeJS.Timeout;
  private lastWindowMaxMs = 0;
  private lastTick = performance.now();
  private lastBeat = performance.now();
  /** The longest gap between two beats in this window and in the last one. */
  private windowBeatGapMs = 0;
  private lastWindowBeatGapMs = 0;

  constructor() {
    this.histogram.enable();
    this.timer = setInterval(() => {
      this.lastWindowMaxMs = this.histogram.max / 1e6;
      this.histogram.reset();
      this.lastWindowBeatGapMs = this.windowBeatGapMs;
      this.windowBeatGapMs = 0;
      this.lastTick = performance.now();
    }, WINDOW_MS);
    this.timer.unref();
    this.heartbeat = setInterval(() => {
      const now = performance.now();
      this.windowBeatGapMs = Math.max(this.windowBeatGapMs, now - this.lastBeat - EVENT_LOOP_SAMPLE_MS);
      this.lastBeat = now;
    }, EVENT_LOOP_SAMPLE_MS);
    this.heartbeat.unref();
  }

  delayMs(): number {
    const now = performance.now();
    const current = this.histogram.count > 0 ? this.histogram.max / 1e6 : 0;
    const overdue = now - this.lastTick - WINDOW_MS;
    // A block is seen as a beat still overdue, or, once the beat has come, as the gap it left.
    const beatOverdue = now - this.lastBeat - EVENT_LOOP_SAMPLE_MS;
    return Math.max(
      this.lastWindowMaxMs,
      current,
      overdue,
      beatOverdue,
      this.windowBeatGapMs,
      this.lastWindowBeatGapMs,
      0,
    );
  }

  /** Forgets what was measured so far (the blocking work of a start is not a stall). */
  reset(): void {
    this.histogram.reset();
    this.lastWindowMaxMs = 0;
    this.lastTick = performance.now();
    this.lastBeat = performance.now();
    this.windowBeatGapMs = 0;
    this.lastWindowBeatGapMs = 0;
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.heartbeat);
    this.histogram.disable();
  }
}

/** The check's outcome as text: `ok`, its error message, or that it did not answer in time. */
async function boundedCheck(check: () => Promise<void>, timeoutMs: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(`no answer within ${timeoutMs} ms`), timeoutMs);
  });
  const run = check().then(
    () => 'ok',
    (error: unknown) => (error instanceof Error ? error.message : String(error)) || 'failed',
  );
  return Promise.race([run, timeout]).finally(() => clearTimeout(timer));
}

export function createProbes({
  readiness,
  liveMaxDelayMs = DEFAULT_LIVE_MAX_DELAY_MS,
  checkTimeoutMs = READY_CHECK_TIMEOUT_MS,
}: {
  /** The named readiness checks; a check resolves when healthy and rejects with the reason. */
  readiness: () => Record<string, () => Promise<void>>;
  liveMaxDelayMs?: number;
  checkTimeoutMs?: number;
}): Probes {
  const monitor = new EventLoopMonitor();
  return {
    live() {
      const delay = Math.round(monitor.delayMs() * 10) / 10;
      return {
        status: delay > liveMaxDelayMs ? 'stalled' : 'ok',
        eventLoopDelayMs: delay,
        maxEventLoopDelayMs: liveMaxDelayMs,
      };
    },
    async ready() {
      const results = await Promise.all(
        Object.entries(readiness()).map(async ([name, check]): Promise<[string, string]> => [
          name,
          await boundedCheck(check, checkTimeoutMs),
        ]),
      );
      const failed = results.filter(([, result]) => result !== 'ok').map(([name]) => name);
      return { status: failed.length === 0 ? 'ready' : 'unavailable', checks: Object.fromEntries(results), failed };
    },
    started: () => monitor.reset(),
    stop: () => monitor.stop(),
  };
}

/** The status code of each probe's answer. */
function liveStatus(report: LiveReport): 200 | 503 {
  return report.status === 'ok' ? 200 : 503;
}

function readyStatus(report: ReadyReport): 200 | 503 {
  return report.status === 'ready' ? 200 : 503;
}

/**
 * The probe server of `npm run worker` (WORKER_PORT): GET /health/live, GET /health/ready and
 * GET /metrics, answered as the API answers them; anything else is a 404.
 */
export async function serveProbes({
  port,
  host,
  probes,
  metrics,
  log,
}: {
  port: number;
  host: string;
  probes: Probes;
  metrics: () => Promise<{ contentType: string; body: string }>;
  log: Logger;
}): Promise<{ server: Server; url: string }> {
  const send = (res: ServerResponse, status: number, contentType: string, body: string) => {
    res.writeHead(status, {
      'content-type': contentType,
      'content-length': Buffer.byteLength(body),
      'x-content-type-options': 'nosniff',
    });
    res.end(body);
  };
  const json = (res: ServerResponse, status: number, body: unknown) =>
    send(res, status, 'application/json; charset=utf-8', JSON.stringify(body));
  const answer = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://probe.invalid').pathname;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET');
      json(res, 405, { error: 'Method Not Allowed', details: 'The probes answer GET only.' });
      return;
    }
    if (path === '/health/live') {
      const report = probes.live();
      json(res, liveStatus(report), report);
    } else if (path === '/health/ready') {
      const report = await probes.ready();
      if (report.failed.length > 0) log.warn({ checks: report.checks }, 'readiness check failed');
      json(res, readyStatus(report), report);
    } else if (path === '/metrics') {
      const { contentType, body } = await metrics();
      send(res, 200, contentType, body);
    } else {
      json(res, 404, { error: 'Not Found', details: 'This port serves /health/live, /health/ready and /metrics.' });
    }
  };
  const server = createServer((req, res) => {
    answer(req, res).catch((error: unknown) => {
      log.error({ err: error }, 'probe failed');
      if (!res.headersSent) json(res, 500, { error: 'Internal Server Error', details: 'The probe failed.' });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  log.info({ url }, 'worker probes listening');
  return { server, url };
}
