// Helpers of the k6 scripts in load/ (k6 runs them; the Node runner in load/runner plays the same
// scenarios from load/scenarios.json). Where the service and its targets are:
//   -e SANDBOX=/absolute/path/to/.data/sandbox.json   everything from the sandbox of `npm start`
//   -e BASE_URL=http://127.0.0.1:3000 -e API_KEY=prs_... -e TARGET_URL=http://127.0.0.1:<port>
// TARGET_URL is an x402 test target with the /free, /paid and /hold routes (devnet), such as
// the sandbox's base-sepolia target; the variables win over the sandbox file.
import http from 'k6/http';
import { check } from 'k6';

export const UNKNOWN_WEBHOOK_ID = '6f1c1f4e-0000-4000-8000-00000000cafe';

function stripSlash(url) {
  return url.replace(/\/+$/, '');
}

/** Settings from the environment and the sandbox file (parsed by the entry script's open()). */
export function settings(env, sandbox) {
  const file = sandbox || {};
  const targets = file.targets || {};
  const baseUrl = stripSlash(env.BASE_URL || file.baseUrl || 'http://127.0.0.1:3000');
  const targetUrl = stripSlash(env.TARGET_URL || targets['base-sepolia'] || '');
  return {
    baseUrl,
    apiKey: env.API_KEY || file.apiKey || '',
    targetUrl,
    bindings: {
      HOLD_URL: targetUrl + '/hold',
      FREE_URL: targetUrl + '/free',
      PAID_URL: targetUrl + '/paid',
      WEBHOOK_ID: env.WEBHOOK_ID || UNKNOWN_WEBHOOK_ID,
    },
  };
}

function substitute(value, bindings) {
  if (typeof value === 'string') {
    return value.replace(/\$\{(HOLD_URL|FREE_URL|PAID_URL|WEBHOOK_ID)\}/g, function (_match, name) {
      return bindings[name];
    });
  }
  if (Array.isArray(value)) return value.map((item) => substitute(item, bindings));
  if (value && typeof value === 'object') {
    const copy = {};
    for (const key of Object.keys(value)) copy[key] = substitute(value[key], bindings);
    return copy;
  }
  return value;
}

/** One request of load/scenarios.json, ready for http.request. */
export function requestOf(scenarios, name, config) {
  const template = scenarios.requests[name];
  if (!template) throw new Error('no request ' + name + ' in load/scenarios.json');
  if (template.apiKey && !config.apiKey) throw new Error(name + ' needs an API key: -e API_KEY=... or -e SANDBOX=...');
  if (/\$\{(HOLD|FREE|PAID)_URL\}/.test(JSON.stringify(template)) && !config.targetUrl) {
    throw new Error(name + ' needs an x402 test target: -e TARGET_URL=... or -e SANDBOX=...');
  }
  const headers = {};
  if (template.apiKey) headers['x-api-key'] = config.apiKey;
  if (template.body !== undefined) headers['content-type'] = 'application/json';
  return {
    name,
    method: template.method,
    url: config.baseUrl + substitute(template.path, config.bindings),
    body: template.body === undefined ? null : JSON.stringify(substitute(template.body, config.bindings)),
    headers,
  };
}

export function send(request, params) {
  const merged = Object.assign({}, params || {});
  merged.headers = Object.assign({}, request.headers, (params && params.headers) || {});
  merged.tags = Object.assign({ request: request.name }, (params && params.tags) || {});
  return http.request(request.method, request.url, request.body, merged);
}

function parsed(response) {
  try {
    return response.json();
  } catch {
    return undefined;
  }
}

/**
 * The documented 429 of the concurrency caps (TooManyRequests in the OpenAPI document): a
 * Retry-After of whole seconds, and exactly {code, error, message, details "active/limit", retryAfter}
 * with retryAfter equal to the header and active never above the limit. Checks are tagged
 * kind=cap_429, so that a threshold can require all of them to pass.
 */
export function check429(response, limit) {
  const retryAfter = response.headers['Retry-After'];
  const body = parsed(response) || {};
  const details = /^([0-9]+)\/([0-9]+)$/.exec(String(body.details));
  return check(
    response,
    {
      '429 carries Retry-After (whole seconds)': () =>
        typeof retryAfter === 'string' && /^[1-9][0-9]*$/.test(retryAfter),
      '429 body is {code, error, message, details, retryAfter}': () =>
        Object.keys(body).sort().join(',') === 'code,details,error,message,retryAfter',
      '429 code is capacity_exceeded': () => body.code === 'capacity_exceeded',
      '429 error is "Too Many Requests"': () => body.error === 'Too Many Requests' && typeof body.message === 'string',
      '429 retryAfter equals the Retry-After header': () =>
        Number.isInteger(body.retryAfter) && String(body.retryAfter) === retryAfter,
      '429 details is active/limit, never above the limit': () =>
        details !== null &&
        Number(details[1]) <= Number(details[2]) &&
        (limit === undefined || Number(details[2]) === limit),
    },
    { kind: 'cap_429' },
  );
}

/** A name of `mix` ({name: weight}) picked at random by weight. */
export function pickWeighted(mix) {
  const names = Object.keys(mix);
  let total = 0;
  for (const name of names) total += mix[name];
  let point = Math.random() * total;
  for (const name of names) {
    point -= mix[name];
    if (point < 0) return name;
  }
  return names[names.length - 1];
}

/**
 * The service's own metrics (GET /metrics, the Prometheus text format) as {'name{labels}': value},
 * or undefined when the service does not serve them.
 */
export function serverMetrics(baseUrl) {
  const response = http.get(baseUrl + '/metrics', { tags: { request: 'metrics' } });
  if (response.status !== 200) return undefined;
  const series = {};
  for (const line of String(response.body).split('\n')) {
    if (line === '' || line.charAt(0) === '#') continue;
    const space = line.lastIndexOf(' ');
    series[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return series;
}

export const CAP_GROUPS = ['proxy', 'relay', 'webhooks'];

/** The 429s the service counted per cap group (prs_cap_refusals_total), or undefined without /metrics. */
export function serverRefusals(baseUrl) {
  const series = serverMetrics(baseUrl);
  if (!series) return undefined;
  const counts = {};
  for (const group of CAP_GROUPS) counts[group] = series['prs_cap_refusals_total{group="' + group + '"}'] || 0;
  return counts;
}

/**
 * At the end of a run (teardown): the 429s the service counted per group since `before` (setup's
 * serverRefusals), added to the counter `serverRefused` tagged by group, so that the summary shows
 * server_refused{group:...} next to the clients' own count, and printed.
 */
export function reportServerRefusals(baseUrl, before, serverRefused, groups) {
  const after = serverRefusals(baseUrl);
  if (!before || !after) {
    console.warn('GET ' + baseUrl + '/metrics is not served: the server-side count of 429s is not known');
    return;
  }
  for (const group of groups || CAP_GROUPS) {
    const refused = after[group] - before[group];
    serverRefused.add(refused, { group });
    console.log(
      'the service counted ' + refused + ' 429s on /' + group + ' during the run (server_refused{group:' + group + '})',
    );
  }
}
