/**
 * The service as production runs it: built once (at `npm install`, or `npm run build`), then `npm run serve` (plain
 * node on dist/main.js, no TypeScript loader) in a production install (`npm ci --omit=dev`):
 * every development package, tsx included, unresolvable (test/support/without-dev-packages.mjs).
 * A configured start serves; a zero-config start, which would be the sandbox, says in one line
 * what to install instead of a stack trace.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { generatePrivateKey } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { contractClient } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { ifStarted } from '../support/teardown';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HOOK = fileURLToPath(new URL('../support/without-dev-packages.mjs', import.meta.url));
const WITHOUT_BINDING = fileURLToPath(new URL('../support/without-native-secp256k1.mjs', import.meta.url));

let database: TestDatabase;
let dataDir: string;

beforeAll(async () => {
  // What `npm install` and `npm ci` run last (package.json's prepare script): dist/ built, unless
  // it already is a build of the current files.
  const built = spawnSync('npm', ['run', 'prepare'], { cwd: ROOT, encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`npm run prepare failed: ${built.stderr}`);
  database = await createTestDatabase();
  dataDir = mkdtempSync(path.join(os.tmpdir(), 'production-install-'));
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

/** The parent's environment less everything that configures the service. */
function bareEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (
      /^(EVM_PRIVATE_KEY|SOLANA_PRIVATE_KEY|RPC_URL_|DATABASE_URL|FACILITATOR_URL|FACILITATOR_HEADERS|CDP_API_KEY_|NODE_ENV|PORT|HOST|NETWORKS|SSRF_ALLOW_HOSTS|LLM_)/.test(
        name,
      )
    )
      continue;
    env[name] = value;
  }
  return env;
}

/** `npm run serve`'s node flags (package.json), so the test runs node as the script does. */
function serveFlags(): string[] {
  const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    scripts: { serve: string };
  };
  // The script execs node, so that a signal to npm reaches the service.
  const words = manifest.scripts.serve.split(/\s+/);
  expect(words.shift()).toBe('exec');
  expect(words[0]).toBe('node');
  expect(words.at(-1)).toBe('dist/main.js');
  return words.slice(1, -1);
}

function run(env: Record<string, string>, nodeFlags: string[] = []) {
  return spawn(process.execPath, [...serveFlags(), ...nodeFlags, '--import', HOOK, 'dist/main.js'], {
    cwd: ROOT,
    env: { ...bareEnv(), DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

it("leaves dist/ as npm start wants it after npm install: the start script's check builds nothing", () => {
  const check = spawnSync(process.execPath, ['tools/build.mjs', '--if-stale'], { cwd: ROOT, encoding: 'utf8' });
  expect(check.status).toBe(0);
  expect(check.stdout).toBe('');
  expect(readFileSync(path.join(ROOT, 'dist/build-inputs.json'), 'utf8')).toContain('server/main.ts');
});

describe('a production install without the development packages', () => {
  it('a zero-config start explains in one line what to install, and exits', async () => {
    const child = run({});
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^payment-routing-service: the sandbox .* needs the development packages/);
    expect(lines[0]).toContain('npm install');
    expect(stderr).not.toMatch(/\n\s+at /);
    expect(stdout).toBe('');
  });

  it.each([
    ['with the native secp256k1 binding', [], 'native'],
    ['without it (no prebuild for the platform), on the WebAssembly build', ['--import', WITHOUT_BINDING], 'wasm'],
  ] as const)('a configured start serves, %s', async (_case, preload, implementation) => {
    const child = run(
      {
        DATABASE_URL: database.url,
        HOST: '127.0.0.1',
        PORT: '0',
        NETWORKS: 'base-sepolia',
        EVM_PRIVATE_KEY: generatePrivateKey(),
        RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:9/',
        LOG_LEVEL: 'info',
      },
      [...preload],
    );
    try {
      let stderr = '';
      const logs: { msg?: string; url?: string; secp256k1?: string; passedOver?: { name: string }[] }[] = [];
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`the service did not start: ${stderr}`)), 30_000);
        child.once('exit', (code) => reject(new Error(`the service exited with ${code}: ${stderr}`)));
        createInterface({ input: child.stdout }).on('line', (line) => {
          try {
            const entry = JSON.parse(line) as (typeof logs)[number];
            logs.push(entry);
            if (entry.msg === 'listening' && entry.url) {
              clearTimeout(timer);
              resolve(entry.url);
            }
          } catch {
            // not a log line
          }
        });
      });
      // The choice is made once at start, said in the log and in /metrics.
      const chosen = logs.find((entry) => entry.secp256k1 !== undefined);
      expect(chosen?.secp256k1).toBe(implementation);
      expect(chosen?.passedOver?.map((passed) => passed.name)).toEqual(implementation === 'native' ? [] : ['native']);
      const client = contractClient(url);
      const config = await client.get('/config');
      expect(config.status).toBe(200);
      expect(config.body.networks.v1).toEqual(['base-sepolia']);
      const limits = await client.get('/limits');
      expect(limits.status).toBe(200);
      const metrics = await client.get('/metrics');
      expect(metrics.text).toContain(`prs_secp256k1_implementation{implementation="${implementation}"} 1`);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('a stack trace names the TypeScript source of a frame in the bundle, and leaves other frames as node prints them', () => {
    // A frame at the place in dist/main.js where server/main.ts writes its one-line failure.
    // The bundler may rename the message's variable (message2) when another module has one.
    const statement = 'process.stderr.write(`payment-routing-service: ${';
    const sourceLines = readFileSync(path.join(ROOT, 'server/main.ts'), 'utf8').split('\n');
    const sourceLine = sourceLines.findIndex((line) => line.includes(statement)) + 1;
    const bundleLines = readFileSync(path.join(ROOT, 'dist/main.js'), 'utf8').split('\n');
    const bundleIndex = bundleLines.findIndex((line) => line.includes(statement));
    expect(sourceLine).toBeGreaterThan(0);
    expect(bundleIndex).toBeGreaterThanOrEqual(0);
    const column = (bundleLines[bundleIndex] ?? '').indexOf('process.stderr.write') + 1;
    const script = `
      const frame = (file, line, column) => ({
        getFileName: () => file, getLineNumber: () => line, getColumnNumber: () => column,
        getFunctionName: () => 'fail', getMethodName: () => null,
        isAsync: () => false, isConstructor: () => false, toString: () => 'as node prints it',
      });
      const bundle = new URL('./dist/main.js', 'file://' + process.cwd() + '/').href;
      process.stdout.write(Error.prepareStackTrace(new Error('boom'), [
        frame(bundle, ${bundleIndex + 1}, ${column}),
        frame('node:internal/process/task_queues', 95, 5),
      ]));
    `;
    const flags = serveFlags().filter((flag) => flag.startsWith('--import'));
    expect(flags).toEqual(['--import=./dist/source-maps.js']);
    const result = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', script], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual([
      'Error: boom',
      `    at fail (server/main.ts:${sourceLine}:3)`,
      '    at as node prints it',
    ]);
  });
});
