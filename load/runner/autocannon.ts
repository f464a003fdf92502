/**
 * autocannon runs as the scenarios use them: status counts, latencies with sub-millisecond
 * precision (autocannon's own histogram keeps whole milliseconds and only 2xx), and an optional
 * look at every response (the test validates each one against the OpenAPI document).
 */
import autocannon from 'autocannon';
import { Samples, type LatencySummary } from './stats';

export interface LoadRequest {
  method: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  /** JSON text. */
  body?: string;
}

export interface AutocannonRun {
  baseUrl: string;
  request: LoadRequest;
  connections: number;
  /** Seconds; ignored when amount is set. */
  duration?: number;
  amount?: number;
  /** Requests per second over all connections (open loop); unset: as fast as answers come. */
  overallRate?: number;
  /** Seconds before autocannon gives up on an answer and reconnects. */
  timeoutS?: number;
  onResponse?: (status: number, body: string, headers: Record<string, string | string[]>) => void;
}

export interface RunResult {
  responses: number;
  durationS: number;
  rps: number;
  latency: LatencySummary;
  byStatus: Record<string, LatencySummary>;
  errors: number;
  timeouts: number;
}

export interface RunningLoad {
  /** Ends the run early (the result covers what was answered until then). */
  stop: () => void;
  /** Responses so far, by status. */
  statuses(): Record<string, number>;
  done: Promise<RunResult>;
}

export function startAutocannon(run: AutocannonRun): RunningLoad {
  const all = new Samples();
  const byStatus = new Map<number, Samples>();
  const counts: Record<string, number> = {};
  const startedAt = performance.now();
  let lastAnswerAt = startedAt;
  let instance: ReturnType<typeof autocannon>;
  const onResponse = run.onResponse;
  const done = new Promise<RunResult>((resolve, reject) => {
    instance = autocannon(
      {
        url: run.baseUrl,
        connections: run.connections,
        ...(run.amount === undefined ? { duration: run.duration ?? 5 } : { amount: run.amount }),
        ...(run.overallRate === undefined ? {} : { overallRate: run.overallRate }),
        timeout: run.timeoutS ?? 10,
        excludeErrorStats: false,
        requests: [
          {
            method: run.request.method,
            path: run.request.path,
            headers: {
              ...(run.request.body === undefined ? {} : { 'content-type': 'application/json' }),
              ...run.request.headers,
            },
            ...(run.request.body === undefined ? {} : { body: run.request.body }),
            ...(onResponse
              ? { onResponse: (status, body, _context, headers) => onResponse(status, body, headers) }
              : {}),
          },
        ],
      },
      (error, result) => {
        if (error) {
          reject(error);
          return;
        }
        // autocannon's own elapsed time, in seconds; an early stop ends at the last answer.
        const durationS = Math.min(result.duration || Infinity, (lastAnswerAt - startedAt) / 1000 || Infinity);
        const responses = all.count;
        const summaries: Record<string, LatencySummary> = {};
        for (const [status, samples] of byStatus) summaries[status] = samples.summary();
        resolve({
          responses,
          durationS,
          rps: durationS > 0 ? responses / durationS : 0,
          latency: all.summary(),
          byStatus: summaries,
          errors: result.errors,
          timeouts: result.timeouts,
        });
      },
    );
    instance.on('response', (_client: unknown, status: number, _bytes: number, responseTime: number) => {
      lastAnswerAt = performance.now();
      all.add(responseTime);
      let samples = byStatus.get(status);
      if (!samples) byStatus.set(status, (samples = new Samples()));
      samples.add(responseTime);
      counts[status] = (counts[status] ?? 0) + 1;
    });
  });
  return { stop: () => instance.stop(), statuses: () => ({ ...counts }), done };
}

export function runAutocannon(run: AutocannonRun): Promise<RunResult> {
  return startAutocannon(run).done;
}
