/**
 * Plays k6 scripts under the Node stand-in (load/runner/k6-standin) for tests: runs the script's
 * scenarios, checks every answer it got against the OpenAPI document, and returns the stand-in's
 * summary (checks, metrics, thresholds).
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkResponse } from './contract';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Threshold {
  expression: string;
  value?: number;
  result: 'pass' | 'fail' | 'no data';
}

export interface StandInRun {
  checks: Record<string, { passes: number; fails: number }>;
  metrics: Record<string, { count: number; sum: number }>;
  thresholds: Record<string, Threshold[]>;
}

/** Variables the scripts read for where things are: only the caller's `env` sets them (vitest sets BASE_URL for its own use). */
const WHERE_VARIABLES = ['BASE_URL', 'API_KEY', 'TARGET_URL', 'SANDBOX'];

let runs = 0;

/** Plays `plays` (scenario:iterations) of `script`; its answers are recorded in `directory` and each checked against the document. */
export async function playStandIn(options: {
  script: string;
  plays: string[];
  directory: string;
  env: Record<string, string>;
  timeoutMs: number;
}): Promise<StandInRun> {
  const record = path.join(options.directory, `exchanges-${(runs += 1)}.jsonl`);
  writeFileSync(record, '');
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !WHERE_VARIABLES.includes(name)));
  const output = await new Promise<string>((resolve, reject) => {
    execFile(
      process.execPath,
      [
        '--import',
        './load/runner/k6-standin/register.mjs',
        'load/runner/k6-standin/run.mjs',
        options.script,
        ...options.plays,
      ],
      { cwd: ROOT, env: { ...inherited, K6_STANDIN_RECORD: record, ...options.env }, timeout: options.timeoutMs },
      (error, stdout, stderr) =>
        error ? reject(new Error(`${options.script}: ${error.message}\n${stderr}`)) : resolve(stdout),
    );
  });
  for (const line of readFileSync(record, 'utf8').split('\n').filter(Boolean)) {
    const exchange = JSON.parse(line) as {
      method: string;
      url: string;
      status: number;
      headers: Record<string, string>;
      body: string;
    };
    const headers = new Headers(exchange.headers);
    const isJson = (headers.get('content-type') ?? '').startsWith('application/json');
    const url = new URL(exchange.url);
    await checkResponse(exchange.method, `${url.pathname}${url.search}`, {
      status: exchange.status,
      headers,
      text: exchange.body,
      body: isJson && exchange.body ? JSON.parse(exchange.body) : exchange.body,
      operationId: undefined,
    });
  }
  return JSON.parse(output) as StandInRun;
}
