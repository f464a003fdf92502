// k6/http with synchronous requests, as k6 makes them for a VU: a worker fetches while this
// thread waits on shared memory.
import { appendFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { record } from './state.mjs';

const worker = new Worker(new URL('./fetcher.mjs', import.meta.url));
worker.unref();
const BUFFER_BYTES = 16 * 1024 * 1024;

function canonical(name) {
  return name
    .split('-')
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1).toLowerCase())
    .join('-');
}

function seconds(timeout) {
  if (typeof timeout === 'number') return timeout / 1000;
  const match = /^([0-9.]+)(ms|s|m)?$/.exec(String(timeout ?? '60s'));
  if (!match) return 60;
  const value = Number(match[1]);
  return match[2] === 'ms' ? value / 1000 : match[2] === 'm' ? value * 60 : value;
}

function expected(callback, status) {
  if (callback?.expectedStatuses) {
    return callback.expectedStatuses.some((entry) =>
      typeof entry === 'number' ? entry === status : status >= entry.min && status <= entry.max,
    );
  }
  return status >= 200 && status < 400;
}

function request(method, url, body, params = {}) {
  const flag = new Int32Array(new SharedArrayBuffer(4));
  const data = new SharedArrayBuffer(BUFFER_BYTES);
  const timeoutMs = seconds(params.timeout) * 1000;
  const startedAt = performance.now();
  worker.postMessage({
    request: { method, url, body: body ?? null, headers: params.headers ?? {}, timeoutMs },
    flag,
    data,
  });
  Atomics.wait(flag, 0, 0, timeoutMs + 5_000);
  const length = new DataView(data).getUint32(0);
  const answer = JSON.parse(new TextDecoder().decode(new Uint8Array(data).slice(4, 4 + length)));
  const duration = performance.now() - startedAt;
  const tags = { method, status: String(answer.status), ...(params.tags ?? {}) };
  record('http_reqs', 1, tags);
  record('http_req_duration', duration, tags);
  record('http_req_failed', expected(params.responseCallback, answer.status) ? 0 : 1, tags);
  // K6_STANDIN_RECORD names a file that gets every exchange as a JSON line (the test checks each
  // answer against the OpenAPI document).
  if (process.env.K6_STANDIN_RECORD) {
    appendFileSync(
      process.env.K6_STANDIN_RECORD,
      `${JSON.stringify({ method, url, status: answer.status, headers: answer.headers, body: answer.body })}\n`,
    );
  }
  const headers = {};
  for (const [name, value] of Object.entries(answer.headers)) headers[canonical(name)] = value;
  return {
    status: answer.status,
    headers,
    body: answer.body,
    error: answer.error ?? '',
    timings: { duration },
    json() {
      return JSON.parse(answer.body);
    },
  };
}

export default {
  request,
  get: (url, params) => request('GET', url, null, params),
  post: (url, body, params) => request('POST', url, body, params),
  expectedStatuses: (...statuses) => ({ expectedStatuses: statuses }),
};
