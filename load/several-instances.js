// k6: several API instances on one Postgres behind a load balancer. Each instance's concurrency
// cap holds on its own, and credits and daily limits stay exact across all of them.
//
//   k6 run -e BASE_URL=http://balancer:8080 -e INSTANCE_URLS=http://host-a:3001,http://host-b:3002 \
//     -e API_KEY=prs_... -e TARGET_URL=http://target:4000 -e CAP_PROXY=100 \
//     -e CREDITS_KEY=prs_... -e CREDITS_CALLS=20 -e LIMIT_KEY=prs_... -e LIMIT_CALLS=10 \
//     load/several-instances.js
//
// BASE_URL is the balancer; every call goes through it. INSTANCE_URLS names each instance directly,
// in any order, for its own GET /metrics (prs_requests_in_flight, prs_cap_refusals_total,
// prs_paid_calls_total) and GET /metrics/rate-limits. The balancer should name the instance that
// answered in an X-Upstream header (host:port, as nginx's `add_header X-Upstream $upstream_addr
// always;`; the round robin of the Node runner, load/runner/roundRobin.ts, does): answers are
// then counted per instance too (tag instance = its position in INSTANCE_URLS, from 1).
//
// Scenarios (ONLY, a comma list, default caps,credits,limit):
// - caps: FACTOR (default 3) x CAP_PROXY clients per instance on POST /proxy to the target's /hold
//   route (it keeps each call open, 60 s on the sandbox), for RAMP + STEADY seconds; an observer
//   polls each instance's /metrics. Thresholds: admitted_held{instance:N} count <= CAP_PROXY and
//   admitted_held count <= instances x CAP_PROXY (a call still held at the end is counted when it
//   comes back, within gracefulStop); refused count > 0; checks{kind:cap_429} rate == 1;
//   instance_over_cap count == 0 (no instance's /metrics ever showed more in flight than its
//   limit); instance_in_flight{instance:N} max <= CAP_PROXY; server_refused{instance:N} count > 0
//   (each instance itself refused past its cap: prs_cap_refusals_total over the run).
// - credits: 3 x CREDITS_CALLS paid POST /proxy calls at once with CREDITS_KEY, whose organisation
//   has credits for exactly CREDITS_CALLS calls of CALL_CREDITS credits (default 11: 0.01 USDC plus
//   3%, the sandbox's /paid; setup checks GET /credits/balance). Thresholds: credits_paid count ==
//   CREDITS_CALLS; credits_refused (402 insufficient_credits) count == the rest;
//   credits_unexpected count == 0; credits_balance_error count == 0 (at the end the balance is
//   exactly the paid calls less, and never below 0).
// - limit: 3 x LIMIT_CALLS paid calls at once with LIMIT_KEY, whose daily cap has room for exactly
//   LIMIT_CALLS calls (its organisation has credits for more). Thresholds: limit_paid count ==
//   LIMIT_CALLS; limit_refused (429 spend_limit_exceeded) count == the rest; limit_unexpected
//   count == 0; limit_spent_error count == 0 (the key's daily_spent rose by exactly the paid calls,
//   never past its cap, and the balance fell by as much).
// A paid call refused by an instance's concurrency cap (429 capacity_exceeded) is sent again after
// Retry-After (counted as capacity_retries): keep 3 x CALLS under the instances' caps for a burst.
// Both paid scenarios: server_paid_error count == 0 (the instances' prs_paid_calls_total{mode=
// "proxy"}, paid and pending, rose by exactly the calls allowed, summed over the instances; each
// instance's share is reported as server_paid{instance:N}).
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { check429, requestOf, send, serverMetrics, settings } from './lib/k6.js';

const scenarios = JSON.parse(open('./scenarios.json'));
const config = settings(__ENV, __ENV.SANDBOX ? JSON.parse(open(__ENV.SANDBOX)) : undefined);
const only = (__ENV.ONLY || 'caps,credits,limit').split(',').filter(Boolean);
const instanceUrls = (__ENV.INSTANCE_URLS || '')
  .split(',')
  .filter(Boolean)
  .map((url) => url.replace(/\/+$/, ''));
if (instanceUrls.length === 0) throw new Error('INSTANCE_URLS: name each instance behind BASE_URL (comma list)');
const instanceNames = instanceUrls.map((_url, index) => String(index + 1));
const cap = Number(__ENV.CAP_PROXY || scenarios.caps.groups.proxy.defaultCap);
const factor = Number(__ENV.FACTOR || scenarios.caps.overloadFactor);
const rampS = Number(__ENV.RAMP || scenarios.caps.k6.rampSeconds);
const steadyS = Number(__ENV.STEADY || scenarios.caps.k6.steadySeconds);
const pauseS = Number(__ENV.PAUSE || 0.05);
const callCredits = Number(__ENV.CALL_CREDITS || 11);
const creditsCalls = Number(__ENV.CREDITS_CALLS || 0);
const limitCalls = Number(__ENV.LIMIT_CALLS || 0);
for (const name of only) {
  if (!['caps', 'credits', 'limit'].includes(name)) throw new Error('ONLY: unknown scenario ' + name);
}
if (only.includes('credits') && (!__ENV.CREDITS_KEY || !(creditsCalls > 0))) {
  throw new Error('the credits scenario needs -e CREDITS_KEY=... -e CREDITS_CALLS=... (or leave it out of ONLY)');
}
if (only.includes('limit') && (!__ENV.LIMIT_KEY || !(limitCalls > 0))) {
  throw new Error('the limit scenario needs -e LIMIT_KEY=... -e LIMIT_CALLS=... (or leave it out of ONLY)');
}

const admittedHeld = new Counter('admitted_held');
const refused = new Counter('refused');
const inFlight = new Trend('instance_in_flight');
const overCap = new Counter('instance_over_cap');
const serverRefused = new Counter('server_refused');
const creditsPaid = new Counter('credits_paid');
const creditsRefused = new Counter('credits_refused');
const creditsUnexpected = new Counter('credits_unexpected');
const creditsBalanceError = new Counter('credits_balance_error');
const limitPaid = new Counter('limit_paid');
const limitRefused = new Counter('limit_refused');
const limitUnexpected = new Counter('limit_unexpected');
const limitSpentError = new Counter('limit_spent_error');
const serverPaid = new Counter('server_paid');
const serverPaidError = new Counter('server_paid_error');
const capacityRetries = new Counter('capacity_retries');

const executors = {};
const thresholds = {};
let startS = 0;
if (only.includes('caps')) {
  executors.caps = {
    executor: 'ramping-vus',
    exec: 'overload',
    startVUs: 0,
    stages: [
      { duration: rampS + 's', target: factor * cap * instanceUrls.length },
      { duration: steadyS + 's', target: factor * cap * instanceUrls.length },
    ],
    gracefulRampDown: '0s',
    gracefulStop: scenarios.caps.k6.gracefulStopSeconds + 's',
  };
  executors.observer = { executor: 'constant-vus', exec: 'observe', vus: 1, duration: rampS + steadyS + 's' };
  thresholds.admitted_held = ['count<=' + cap * instanceUrls.length];
  thresholds.refused = ['count>0'];
  thresholds['checks{kind:cap_429}'] = ['rate==1'];
  thresholds.instance_over_cap = ['count==0'];
  for (const name of instanceNames) {
    thresholds['admitted_held{instance:' + name + '}'] = ['count<=' + cap];
    thresholds['instance_in_flight{instance:' + name + '}'] = ['max<=' + cap];
    thresholds['server_refused{instance:' + name + '}'] = ['count>0'];
  }
  // The held calls come back when the target lets them go: the paid calls start after that.
  startS += rampS + steadyS + scenarios.caps.k6.gracefulStopSeconds + 5;
}
function paidScenario(name, calls) {
  executors[name] = {
    executor: 'shared-iterations',
    exec: name === 'credits' ? 'creditsCall' : 'limitCall',
    vus: 3 * calls,
    iterations: 3 * calls,
    maxDuration: '120s',
    startTime: startS + 's',
  };
  startS += 125;
}
if (only.includes('credits')) {
  paidScenario('credits', creditsCalls);
  thresholds.credits_paid = ['count==' + creditsCalls];
  thresholds.credits_refused = ['count==' + 2 * creditsCalls];
  thresholds.credits_unexpected = ['count==0'];
  thresholds.credits_balance_error = ['count==0'];
}
if (only.includes('limit')) {
  paidScenario('limit', limitCalls);
  thresholds.limit_paid = ['count==' + limitCalls];
  thresholds.limit_refused = ['count==' + 2 * limitCalls];
  thresholds.limit_unexpected = ['count==0'];
  thresholds.limit_spent_error = ['count==0'];
}
if (only.includes('credits') || only.includes('limit')) {
  thresholds.server_paid_error = ['count==0'];
  // Listed for the summary: paid calls sent again after a 429 of a cap (VUs over the caps).
  thresholds.capacity_retries = ['count>=0'];
  for (const name of instanceNames) thresholds['server_paid{instance:' + name + '}'] = ['count>=0'];
}

export const options = { scenarios: executors, thresholds };

/** The instance (its position in INSTANCE_URLS, from 1) that answered, from the balancer's X-Upstream header. */
function instanceOf(response) {
  const upstream = String(response.headers['X-Upstream'] || '');
  for (let index = 0; index < instanceUrls.length; index += 1) {
    if (upstream !== '' && instanceUrls[index].endsWith('//' + upstream)) return instanceNames[index];
  }
  return 'unknown';
}

function balanceOf(key) {
  const response = http.get(config.baseUrl + '/v1/credits/balance', {
    headers: { 'x-api-key': key },
    tags: { request: 'creditsBalance' },
  });
  if (response.status !== 200)
    exec.test.abort('GET /v1/credits/balance answered ' + response.status + ': ' + response.body);
  return response.json();
}

/** prs_cap_refusals_total and prs_paid_calls_total{mode="proxy"} (paid and pending) of each instance. */
function instanceCounts() {
  return instanceUrls.map((url) => {
    const series = serverMetrics(url);
    if (!series) exec.test.abort('GET ' + url + '/metrics is not served: the per-instance counts cannot be read');
    return {
      refused: series['prs_cap_refusals_total{group="proxy"}'] || 0,
      paid:
        (series['prs_paid_calls_total{mode="proxy",result="paid"}'] || 0) +
        (series['prs_paid_calls_total{mode="proxy",result="pending"}'] || 0),
    };
  });
}

export function setup() {
  const data = {};
  if (only.includes('caps')) {
    for (const url of instanceUrls) {
      const response = http.get(url + '/metrics/rate-limits', { tags: { request: 'capMetrics' } });
      if (response.status !== 200) exec.test.abort('GET ' + url + '/metrics/rate-limits answered ' + response.status);
      const limit = response.json().proxy.limit;
      if (limit !== cap) exec.test.abort(url + ' caps /proxy at ' + limit + ': run with -e CAP_PROXY=' + limit);
    }
    requestOf(scenarios, 'proxyHold', config);
  }
  if (only.includes('credits')) {
    const balance = balanceOf(__ENV.CREDITS_KEY);
    const affordable = Math.floor(balance.effective_available / callCredits);
    if (affordable !== creditsCalls) {
      exec.test.abort(
        'CREDITS_KEY has ' +
          balance.effective_available +
          ' credits: ' +
          affordable +
          ' calls of ' +
          callCredits +
          ' (-e CREDITS_CALLS=' +
          affordable +
          ', or -e CALL_CREDITS=...)',
      );
    }
    if (balance.daily_remaining < creditsCalls * callCredits)
      exec.test.abort("CREDITS_KEY's daily cap would refuse first");
    data.credits = balance;
  }
  if (only.includes('limit')) {
    const balance = balanceOf(__ENV.LIMIT_KEY);
    const allowed = Math.floor(balance.daily_remaining / callCredits);
    if (allowed !== limitCalls) {
      exec.test.abort(
        "LIMIT_KEY's daily cap has room for " +
          allowed +
          ' calls of ' +
          callCredits +
          ' credits (-e LIMIT_CALLS=' +
          allowed +
          ')',
      );
    }
    if (balance.effective_available < 3 * limitCalls * callCredits)
      exec.test.abort("LIMIT_KEY's credits would refuse first");
    data.limit = balance;
  }
  data.counts = instanceCounts();
  return data;
}

export function teardown(data) {
  const counts = instanceCounts();
  if (only.includes('caps')) {
    counts.forEach((count, index) => {
      serverRefused.add(count.refused - data.counts[index].refused, { instance: instanceNames[index] });
    });
  }
  let expectedPaid = 0;
  if (only.includes('credits')) {
    expectedPaid += creditsCalls;
    // A call the chain had not shown by the end of its request keeps its reservation until a
    // worker's job charges or releases it: wait for the balance to come to rest.
    const expected = data.credits.effective_available - creditsCalls * callCredits;
    let balance = balanceOf(__ENV.CREDITS_KEY);
    for (let wait = 0; wait < 60 && balance.effective_available !== expected; wait += 1) {
      sleep(1);
      balance = balanceOf(__ENV.CREDITS_KEY);
    }
    const exact = balance.effective_available === expected && balance.effective_available >= 0;
    creditsBalanceError.add(exact ? 0 : 1);
    console.log(
      'credits: balance ' +
        data.credits.effective_available +
        ' -> ' +
        balance.effective_available +
        ' (expected ' +
        expected +
        ')',
    );
  }
  if (only.includes('limit')) {
    expectedPaid += limitCalls;
    const spent = data.limit.daily_spent + limitCalls * callCredits;
    const expected = data.limit.effective_available - limitCalls * callCredits;
    let balance = balanceOf(__ENV.LIMIT_KEY);
    for (
      let wait = 0;
      wait < 60 && (balance.daily_spent !== spent || balance.effective_available !== expected);
      wait += 1
    ) {
      sleep(1);
      balance = balanceOf(__ENV.LIMIT_KEY);
    }
    const exact =
      balance.daily_spent === spent &&
      balance.daily_spent <= balance.daily_cap &&
      balance.effective_available === expected;
    limitSpentError.add(exact ? 0 : 1);
    console.log(
      'limit: daily_spent ' +
        data.limit.daily_spent +
        ' -> ' +
        balance.daily_spent +
        ' of ' +
        balance.daily_cap +
        ' (expected ' +
        spent +
        '); balance ' +
        data.limit.effective_available +
        ' -> ' +
        balance.effective_available,
    );
  }
  if (only.includes('credits') || only.includes('limit')) {
    let total = 0;
    const after = instanceCounts();
    after.forEach((count, index) => {
      const paid = count.paid - data.counts[index].paid;
      total += paid;
      serverPaid.add(paid, { instance: instanceNames[index] });
    });
    serverPaidError.add(total === expectedPaid ? 0 : 1);
    console.log('the instances counted ' + total + ' paid /proxy calls (expected ' + expectedPaid + ')');
  }
}

export function overload() {
  const request = requestOf(scenarios, 'proxyHold', config);
  const response = send(request, {
    timeout: '120s',
    tags: { group: 'proxy' },
    responseCallback: http.expectedStatuses({ min: 200, max: 599 }),
  });
  const instance = instanceOf(response);
  if (response.status === 429) {
    refused.add(1, { instance });
    check429(response, cap);
    sleep(pauseS);
    return;
  }
  admittedHeld.add(1, { instance });
}

export function observe() {
  instanceUrls.forEach((url, index) => {
    const series = serverMetrics(url);
    if (!check(series, { 'GET /metrics of each instance is 200': (s) => s !== undefined })) return;
    const active = series['prs_requests_in_flight{group="proxy"}'];
    const limit = series['prs_requests_in_flight_limit{group="proxy"}'];
    inFlight.add(active, { instance: instanceNames[index] });
    overCap.add(active > limit ? 1 : 0, { instance: instanceNames[index] });
  });
  sleep(0.1);
}

function paidCall(key, refusal, paid, refusedCounter, unexpected) {
  const request = requestOf(scenarios, 'proxyPaid', Object.assign({}, config, { apiKey: key }));
  let response;
  let code;
  // A 429 of an instance's concurrency cap says nothing about money: the call is sent again
  // after Retry-After, as a client would.
  for (let attempt = 0; attempt < 30; attempt += 1) {
    response = send(request, { timeout: '60s', responseCallback: http.expectedStatuses(200, 402, 429) });
    try {
      code = response.json().code;
    } catch {
      code = undefined;
    }
    if (response.status !== 429 || code !== 'capacity_exceeded') break;
    capacityRetries.add(1);
    sleep(Number(response.headers['Retry-After'] || 1));
  }
  const instance = instanceOf(response);
  // Zeros too: a threshold on a counter with no samples has no data.
  capacityRetries.add(0);
  unexpected.add(0, { instance });
  if (response.status === 200) paid.add(1, { instance });
  else if (response.status === refusal.status && code === refusal.code) refusedCounter.add(1, { instance });
  else {
    unexpected.add(1, { instance });
    console.warn('unexpected answer ' + response.status + ': ' + String(response.body).slice(0, 200));
  }
}

export function creditsCall() {
  paidCall(
    __ENV.CREDITS_KEY,
    { status: 402, code: 'insufficient_credits' },
    creditsPaid,
    creditsRefused,
    creditsUnexpected,
  );
}

export function limitCall() {
  paidCall(__ENV.LIMIT_KEY, { status: 429, code: 'spend_limit_exceeded' }, limitPaid, limitRefused, limitUnexpected);
}
