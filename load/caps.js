// k6: the concurrency caps (CAP_RELAY, CAP_PROXY, CAP_WEBHOOKS) driven well past their limits.
//
//   k6 run -e SANDBOX=$PWD/.data/sandbox.json load/caps.js
//   k6 run -e BASE_URL=... -e API_KEY=... -e TARGET_URL=... -e CAP_PROXY=100 load/caps.js
//
// Options (-e): GROUPS (default proxy,relay,webhooks), CAP_PROXY / CAP_RELAY / CAP_WEBHOOKS (the
// service's caps; default the documented 100 / 50 / 200, checked against /metrics/rate-limits in
// setup), FACTOR (concurrency as a multiple of the cap, default 3), RAMP and STEADY (seconds),
// PAUSE (seconds a refused client waits before trying again, default 0.05).
//
// /proxy and /relay name the target's /hold route: the service calls the target first in both
// modes, and the target keeps each call open (the sandbox's for 60 s), so every request the
// service admits stays in flight for the whole run. Thresholds:
// - admitted_held{group}: count <= the cap (nothing admitted over a cap: the admitted ones are
//   still held when the run ends, and they are counted when they come back, within gracefulStop);
// - refused{group}: count > 0 (the overload did happen; /proxy and /relay);
// - checks{kind:cap_429}: rate == 1 (every 429 carries Retry-After and the documented body);
// - cap_over_limit: count == 0 (GET /metrics/rate-limits, polled throughout, never shows more
//   active requests than the limit). /webhooks/{id} answers at once, so it is watched this way
//   and by its 429s only.
// At the end (teardown), the service's own count of 429s per group since setup (GET /metrics,
// prs_cap_refusals_total) is reported as server_refused{group}, next to the clients' refused{group};
// the two agree when nothing else drove the service meanwhile.
// The hold must outlast RAMP + STEADY (the sandbox's does: 60 s against 30 s by default).
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { check429, reportServerRefusals, requestOf, send, serverRefusals, settings } from './lib/k6.js';

const scenarios = JSON.parse(open('./scenarios.json'));
const config = settings(__ENV, __ENV.SANDBOX ? JSON.parse(open(__ENV.SANDBOX)) : undefined);
const groups = (__ENV.GROUPS || 'proxy,relay,webhooks').split(',').filter(Boolean);
const factor = Number(__ENV.FACTOR || scenarios.caps.overloadFactor);
const rampS = Number(__ENV.RAMP || scenarios.caps.k6.rampSeconds);
const steadyS = Number(__ENV.STEADY || scenarios.caps.k6.steadySeconds);
const pauseS = Number(__ENV.PAUSE || 0.05);
const caps = {};
for (const group of groups) {
  if (!scenarios.caps.groups[group]) throw new Error('GROUPS: unknown group ' + group + ' (proxy, relay, webhooks)');
  caps[group] = Number(__ENV['CAP_' + group.toUpperCase()] || scenarios.caps.groups[group].defaultCap);
}

const admittedHeld = new Counter('admitted_held');
const admitted = new Counter('admitted');
const refused = new Counter('refused');
const active = new Trend('cap_active');
const overLimit = new Counter('cap_over_limit');
const serverRefused = new Counter('server_refused');

const thresholds = {
  'checks{kind:cap_429}': ['rate==1'],
  cap_over_limit: ['count==0'],
};
const executors = {};
for (const group of groups) {
  const heldAtTarget = scenarios.caps.groups[group].heldBy === 'target';
  executors[group] = {
    executor: 'ramping-vus',
    exec: 'overload',
    env: { GROUP: group },
    startVUs: 0,
    stages: [
      { duration: rampS + 's', target: factor * caps[group] },
      { duration: steadyS + 's', target: factor * caps[group] },
    ],
    gracefulRampDown: '0s',
    // Held requests come back when the target's hold times out: count them before the end.
    gracefulStop: scenarios.caps.k6.gracefulStopSeconds + 's',
  };
  if (heldAtTarget) {
    thresholds['admitted_held{group:' + group + '}'] = ['count<=' + caps[group]];
    thresholds['refused{group:' + group + '}'] = ['count>0'];
  } else {
    // Listed for the summary, beside the service's count.
    thresholds['refused{group:' + group + '}'] = ['count>=0'];
  }
  thresholds['server_refused{group:' + group + '}'] = ['count>=0'];
}
executors.observer = {
  executor: 'constant-vus',
  exec: 'observe',
  vus: 1,
  duration: rampS + steadyS + 's',
};

export const options = { scenarios: executors, thresholds };

export function setup() {
  const response = http.get(config.baseUrl + '/metrics/rate-limits');
  if (response.status !== 200) {
    exec.test.abort(
      'GET ' +
        config.baseUrl +
        '/metrics/rate-limits answered ' +
        response.status +
        (response.error ? ' (' + response.error + ')' : ''),
    );
  }
  const metrics = response.json();
  for (const group of groups) {
    if (metrics[group].limit !== caps[group]) {
      exec.test.abort(
        'the service caps ' +
          group +
          ' at ' +
          metrics[group].limit +
          ': run with -e CAP_' +
          group.toUpperCase() +
          '=' +
          metrics[group].limit,
      );
    }
  }
  for (const group of groups) requestOf(scenarios, scenarios.caps.groups[group].request, config);
  return { serverRefusals: serverRefusals(config.baseUrl) };
}

export function teardown(data) {
  reportServerRefusals(config.baseUrl, data && data.serverRefusals, serverRefused, groups);
}

export function overload() {
  const group = __ENV.GROUP;
  const request = requestOf(scenarios, scenarios.caps.groups[group].request, config);
  // Longer than the target's hold: a held request must not be cut by the client (a client that
  // goes away frees its slot at once).
  const response = send(request, {
    timeout: '120s',
    tags: { group },
    responseCallback: http.expectedStatuses({ min: 200, max: 599 }),
  });
  if (response.status === 429) {
    refused.add(1, { group });
    check429(response, caps[group]);
    sleep(pauseS);
    return;
  }
  admitted.add(1, { group });
  if (scenarios.caps.groups[group].heldBy === 'target') admittedHeld.add(1, { group });
}

export function observe() {
  const response = http.get(config.baseUrl + '/metrics/rate-limits', { tags: { request: 'capMetrics' } });
  if (check(response, { 'GET /metrics/rate-limits is 200': (r) => r.status === 200 })) {
    const metrics = response.json();
    for (const group of groups) {
      active.add(metrics[group].active, { group });
      overLimit.add(metrics[group].active > metrics[group].limit ? 1 : 0, { group });
    }
  }
  sleep(0.1);
}
