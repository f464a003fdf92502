// node --import ./register.mjs run.mjs <k6 script> [scenario:iterations ...]
// Loads the script (its init code, with k6's open and __ENV), runs setup(), then the given number
// of iterations of each named scenario (its exec function, its env), one after the other, then
// teardown(data), and prints {options, checks, metrics, thresholds} as JSON. Thresholds on metrics
// with no samples are reported as "no data". The script's console output goes to stderr, as k6's.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { format } from 'node:util';
import { current, samples } from './state.mjs';

const [scriptArg, ...plays] = process.argv.slice(2);
const script = path.resolve(scriptArg);
for (const level of ['log', 'info', 'warn', 'error', 'debug'])
  console[level] = (...args) => process.stderr.write(`${format(...args)}\n`);
globalThis.__ENV = { ...process.env };
globalThis.__VU = 1;
globalThis.__ITER = 0;
// k6 resolves open()'s relative paths against the script that calls it.
globalThis.open = (file) => readFileSync(path.isAbsolute(file) ? file : path.join(path.dirname(script), file), 'utf8');

const module = await import(script);
const scenarios = module.options?.scenarios ?? { default: { exec: 'default' } };
const data = module.setup ? module.setup() : undefined;
for (const play of plays) {
  const [name, count] = play.split(':');
  const scenario = scenarios[name];
  if (!scenario) throw new Error(`no scenario ${name} in ${scriptArg}`);
  const exec = module[scenario.exec ?? 'default'];
  for (let iteration = 0; iteration < Number(count ?? 1); iteration += 1) {
    globalThis.__ENV = { ...process.env, ...(scenario.env ?? {}) };
    globalThis.__ITER = iteration;
    current.tags = { scenario: name };
    exec(data);
  }
  current.tags = {};
}
if (module.teardown) {
  globalThis.__ENV = { ...process.env };
  module.teardown(data);
}

function selected(selector) {
  const match = /^([a-zA-Z0-9_]+)(?:\{(.*)\})?$/.exec(selector);
  const [, metric, filter] = match;
  const wanted = filter ? filter.split(',').map((pair) => pair.split(':')) : [];
  return samples
    .filter((sample) => sample.metric === metric && wanted.every(([key, value]) => sample.tags[key] === value))
    .map((sample) => sample.value);
}

function aggregate(values, name) {
  if (name === 'count') return values.reduce((sum, value) => sum + value, 0);
  if (name === 'rate') return values.reduce((sum, value) => sum + value, 0) / values.length;
  if (name === 'max') return Math.max(...values);
  if (name === 'min') return Math.min(...values);
  if (name === 'avg') return values.reduce((sum, value) => sum + value, 0) / values.length;
  const percentile = /^p\(([0-9.]+)\)$/.exec(name);
  if (percentile) {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil((Number(percentile[1]) / 100) * sorted.length) - 1)];
  }
  throw new Error(`aggregation ${name} is not known to the stand-in`);
}

const thresholds = {};
for (const [selector, expressions] of Object.entries(module.options?.thresholds ?? {})) {
  const values = selected(selector);
  thresholds[selector] = expressions.map((expression) => {
    const [, name, operator, bound] = /^\s*([a-z]+(?:\([0-9.]+\))?)\s*(<=|>=|==|!=|<|>)\s*([0-9.]+)\s*$/.exec(
      expression,
    );
    if (values.length === 0) return { expression, result: 'no data' };
    const value = aggregate(values, name);
    const limit = Number(bound);
    const passed = {
      '<=': value <= limit,
      '>=': value >= limit,
      '==': value === limit,
      '!=': value !== limit,
      '<': value < limit,
      '>': value > limit,
    }[operator];
    return { expression, value, result: passed ? 'pass' : 'fail' };
  });
}

const checks = {};
for (const sample of samples.filter((entry) => entry.metric === 'checks')) {
  const entry = (checks[sample.tags.check] ??= { passes: 0, fails: 0 });
  if (sample.value === 1) entry.passes += 1;
  else entry.fails += 1;
}
const metrics = {};
for (const sample of samples) {
  const key = `${sample.metric}${JSON.stringify(Object.fromEntries(Object.entries(sample.tags).filter(([name]) => !['check', 'method', 'status'].includes(name))))}`;
  const entry = (metrics[key] ??= { count: 0, sum: 0 });
  entry.count += 1;
  entry.sum += sample.value;
}
process.stdout.write(`${JSON.stringify({ options: module.options, checks, metrics, thresholds })}\n`);
process.exit(0);
