// k6: a soak: the soak mix of load/scenarios.json (/config, /health, /metrics/rate-limits,
// pass-through and paid /proxy, an unknown /webhooks/{id}) at a steady arrival rate for a long
// time. Latency and errors must stay flat; watch the service's memory (RSS) alongside.
//
//   k6 run -e SANDBOX=$PWD/.data/sandbox.json load/soak.js
//   k6 run -e SANDBOX=$PWD/.data/sandbox.json -e DURATION=2h -e RATE=50 load/soak.js
//
// Options (-e): DURATION (default 30m), RATE (requests per second, default 20). Paid calls are 5%
// of the mix: 30 minutes at 20/s is about 1,800 paid calls, about 20,000 credits on the sandbox's
// /paid (the sandbox's demo key has 100,000). Thresholds: failed requests under 0.1% (the unknown
// webhook's 404 is expected), every check passes, p99 per request kind under P99_MS (default
// 500; 3000 for paid calls). At the end (teardown), the 429s the service counted during the run
// (GET /metrics) are reported per cap group as server_refused{group}.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { CAP_GROUPS, pickWeighted, reportServerRefusals, requestOf, send, serverRefusals, settings } from './lib/k6.js';

const scenarios = JSON.parse(open('./scenarios.json'));
const config = settings(__ENV, __ENV.SANDBOX ? JSON.parse(open(__ENV.SANDBOX)) : undefined);
const rate = Number(__ENV.RATE || scenarios.soak.ratePerSecond);
const mix = scenarios.soak.mix;
const p99Ms = Number(__ENV.P99_MS || 500);
const expected = { webhook: 404 };

const thresholds = {
  http_req_failed: ['rate<0.001'],
  checks: ['rate==1'],
};
for (const name of Object.keys(mix))
  thresholds['http_req_duration{request:' + name + '}'] = ['p(99)<' + (name === 'proxyPaid' ? 3000 : p99Ms)];

const serverRefused = new Counter('server_refused');
// Listed for the summary, beside http_req_failed.
for (const group of CAP_GROUPS) thresholds['server_refused{group:' + group + '}'] = ['count>=0'];

export const options = {
  scenarios: {
    soak: {
      executor: 'constant-arrival-rate',
      exec: 'soak',
      rate,
      timeUnit: '1s',
      duration: __ENV.DURATION || scenarios.soak.k6.duration,
      preAllocatedVUs: Math.max(10, rate),
      maxVUs: Math.max(50, rate * 5),
    },
  },
  thresholds,
};

export function setup() {
  for (const name of Object.keys(mix)) requestOf(scenarios, name, config);
  return { serverRefusals: serverRefusals(config.baseUrl) };
}

export function teardown(data) {
  reportServerRefusals(config.baseUrl, data && data.serverRefusals, serverRefused);
}

export function soak() {
  const name = pickWeighted(mix);
  const status = expected[name] || 200;
  const response = send(requestOf(scenarios, name, config), {
    timeout: '60s',
    responseCallback: http.expectedStatuses(status),
  });
  check(response, { ['status is ' + status]: (r) => r.status === status }, { request: name });
}
