// k6: throughput of GET /config, POST /proxy to a free target (pass-through) and paid POST /proxy,
// one after the other.
//
//   k6 run -e SANDBOX=$PWD/.data/sandbox.json load/throughput.js
//   k6 run -e BASE_URL=... -e API_KEY=... -e TARGET_URL=... load/throughput.js
//
// Options (-e): SECONDS per scenario (default 30), VUS for /config and pass-through (default 50,
// below the default CAP_PROXY of 100: start the service with higher caps for more), PAID_RATE
// (paid calls per second, default 10; each costs the target's price plus the 3% fee in credits:
// 0.01 USDC = 11 credits on the sandbox's /paid), ONLY (a comma list of config, proxyFree,
// proxyPaid). Thresholds: no failed requests, every answer a 200, p99 under P99_MS_CONFIG (250),
// P99_MS_FREE (500) and P99_MS_PAID (2000). At the end (teardown), the 429s the service counted
// during the run (GET /metrics) are reported per cap group as server_refused{group}.
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { CAP_GROUPS, reportServerRefusals, requestOf, send, serverRefusals, settings } from './lib/k6.js';

const scenarios = JSON.parse(open('./scenarios.json'));
const config = settings(__ENV, __ENV.SANDBOX ? JSON.parse(open(__ENV.SANDBOX)) : undefined);
const seconds = Number(__ENV.SECONDS || scenarios.throughput.k6.seconds);
const vus = Number(__ENV.VUS || scenarios.throughput.connections.config);
const paidRate = Number(__ENV.PAID_RATE || scenarios.throughput.k6.paidRatePerSecond);
const only = (__ENV.ONLY || scenarios.throughput.runs.join(',')).split(',').filter(Boolean);
const p99 = {
  config: Number(__ENV.P99_MS_CONFIG || 250),
  proxyFree: Number(__ENV.P99_MS_FREE || 500),
  proxyPaid: Number(__ENV.P99_MS_PAID || 2000),
};

const executors = {};
const thresholds = {};
let startS = 0;
for (const name of scenarios.throughput.runs) {
  if (!only.includes(name)) continue;
  executors[name] =
    name === 'proxyPaid'
      ? {
          executor: 'constant-arrival-rate',
          exec: 'call',
          env: { REQUEST: name },
          rate: paidRate,
          timeUnit: '1s',
          duration: seconds + 's',
          preAllocatedVUs: Math.max(4, paidRate * 2),
          maxVUs: Math.max(20, paidRate * 10),
          startTime: startS + 's',
        }
      : {
          executor: 'constant-vus',
          exec: 'call',
          env: { REQUEST: name },
          vus,
          duration: seconds + 's',
          startTime: startS + 's',
        };
  thresholds['http_req_failed{scenario:' + name + '}'] = ['rate==0'];
  thresholds['http_req_duration{scenario:' + name + '}'] = ['p(99)<' + p99[name]];
  thresholds['checks{scenario:' + name + '}'] = ['rate==1'];
  startS += seconds + 5;
}

const serverRefused = new Counter('server_refused');
// Listed for the summary: a 429 of a cap would also fail the request checks above.
for (const group of CAP_GROUPS) thresholds['server_refused{group:' + group + '}'] = ['count>=0'];

export const options = { scenarios: executors, thresholds };

export function setup() {
  for (const name of only) requestOf(scenarios, name, config);
  return { serverRefusals: serverRefusals(config.baseUrl) };
}

export function teardown(data) {
  reportServerRefusals(config.baseUrl, data && data.serverRefusals, serverRefused);
}

export function call() {
  const request = requestOf(scenarios, __ENV.REQUEST, config);
  const response = send(request, { timeout: '60s' });
  check(response, { 'status is 200': (r) => r.status === 200 });
}
