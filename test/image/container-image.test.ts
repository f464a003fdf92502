/**
 * The container image (Dockerfile) built and run as compose.yaml runs it: one API instance
 * (RUN_WORKER=false) and one worker (dist/main.js --worker-only), started together on a fresh,
 * empty database, so both migrate it at once; an operator command inside the image creates the
 * organisation and its API key; a paid /proxy call to an x402 target of the local peers is paid
 * on the local chain; SIGTERM (the API) or SIGINT (the worker) to each container's first process
 * (tini, PID 1 under docker or podman) ends it with exit code 0 and no process left. The image's size, its build time and its
 * start time (to /health/ready) are printed, never asserted.
 *
 * What differs from a user (README, Container image): no image registry is reachable here, so the
 * base is made from Debian's packages (test/image/make-base-image.sh: debootstrap, Node 22 from
 * the npm registry) and passed as BASE; the image is built with `podman build --isolation chroot`,
 * and, since OCI runtimes cannot start containers on these machines, each container runs through
 * `buildah run --isolation chroot --network host` with the image's entrypoint, command, user,
 * working directory and environment (read from the image), against this run's Postgres and the
 * local peers on 127.0.0.1.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../db/embedded';
import { startPeers, type Peers } from '../../devnet/index';
import { organisationBalance } from '../../payments/accounts/credits';
import { decodePaymentResponseHeader } from '../../payments/x402/headers';
import { ContractViolation, contractClient, type ContractClient } from '../support/contract';
import { createEmptyTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { ifStarted } from '../support/teardown';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const IMAGE = 'localhost/payment-routing-service:test';
/** The build stage, tagged so that its layers (the development install) stay cached between runs. */
const BUILD_STAGE = 'localhost/payment-routing-service:test-build';
const NETWORK = 'base-sepolia';
const PRICE = 12_345n;
/** ceil(12,345 x 1.03 / 1000) */
const CREDITS = 13n;
const GRANTED = 1_000n;
/** Bounds generous for a loaded 2-core machine; nothing is timed. */
const SETUP_BOUND_MS = 40 * 60_000;
const BUILD_BOUND_MS = 30 * 60_000;
const READY_BOUND_MS = 180_000;
const STOP_BOUND_MS = 60_000;
const COMMAND_BOUND_MS = 120_000;

interface ImageConfig {
  Entrypoint: string[];
  Cmd: string[];
  User: string;
  WorkingDir: string;
  Env: string[];
  ExposedPorts?: Record<string, unknown>;
  Healthcheck?: { Test: string[] };
}

let peers: Peers;
let database: TestDatabase;
let config: ImageConfig;
let imageBytes: number;
let buildMs: number;
const containers: string[] = [];
const running: Container[] = [];

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end within `timeoutMs`; rejects with its output when it fails. */
function run(command: string, args: string[], timeoutMs = COMMAND_BOUND_MS): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve({ code, stdout, stderr });
      else
        reject(
          new Error(
            `${command} ${args.join(' ')} exited with ${code}:\n${stdout.slice(-4000)}\n${stderr.slice(-4000)}`,
          ),
        );
    });
  });
}

/** A container of the image, its entrypoint running through `buildah run`. */
interface Container {
  name: string;
  buildah: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
}

/** `buildah run` as docker runs a container: the image's user and working directory, `env` on top of the image's. */
function runArgs(name: string, env: Record<string, string>): string[] {
  return [
    'run',
    '--isolation',
    'chroot',
    '--network',
    'host',
    '--user',
    config.User,
    '--workingdir',
    config.WorkingDir,
    ...Object.entries(env).flatMap(([variable, value]) => ['--env', `${variable}=${value}`]),
    name,
    '--',
  ];
}

async function newContainer(label: string): Promise<string> {
  const name = `payment-routing-test-${label}-${process.pid}`;
  await run('buildah', ['rm', name]).catch(() => undefined);
  await run('buildah', ['from', '--name', name, IMAGE]);
  containers.push(name);
  return name;
}

async function startContainer(label: string, env: Record<string, string>, command: string[]): Promise<Container> {
  const name = await newContainer(label);
  const buildah = spawn('buildah', [...runArgs(name, env), ...config.Entrypoint, ...command], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const container: Container = {
    name,
    buildah,
    output: [],
    exited: new Promise((resolve) => buildah.once('exit', (code) => resolve(code))),
  };
  buildah.stdout.on('data', (chunk: Buffer) => container.output.push(chunk.toString()));
  buildah.stderr.on('data', (chunk: Buffer) => container.output.push(chunk.toString()));
  running.push(container);
  return container;
}

/** A command of the image (its entrypoint, then `command`) in a container of its own, to its end. */
async function exec(label: string, env: Record<string, string>, command: string[]): Promise<string> {
  const name = await newContainer(label);
  return (await run('buildah', [...runArgs(name, env), ...config.Entrypoint, ...command])).stdout;
}

/** The image's HEALTHCHECK command, in a container of its own: true when it exits 0. */
async function healthy(env: Record<string, string>): Promise<boolean> {
  const [kind, ...command] = config.Healthcheck?.Test ?? [];
  expect(kind).toBe('CMD');
  const name = await newContainer(`health-${Math.random().toString(16).slice(2, 8)}`);
  return run('buildah', [...runArgs(name, env), ...command]).then(
    () => true,
    () => false,
  );
}

interface ProcessRow {
  pid: number;
  ppid: number;
  command: string;
}

function processRows(): ProcessRow[] {
  const rows: ProcessRow[] = [];
  for (const entry of readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number)) {
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const command = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').trim();
      rows.push({ pid: entry, ppid, command });
    } catch {
      // ended meanwhile
    }
  }
  return rows;
}

/** The processes below `pid`. */
function descendants(pid: number): ProcessRow[] {
  const rows = processRows();
  const found: ProcessRow[] = [];
  const parents = [pid];
  while (parents.length > 0) {
    const parent = parents.pop();
    for (const row of rows.filter((candidate) => candidate.ppid === parent)) {
      found.push(row);
      parents.push(row.pid);
    }
  }
  return found;
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function uidOf(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((row) => row.startsWith('Uid:'));
  return Number(line?.split(/\s+/)[1]);
}

async function until<T>(
  what: string,
  read: () => Promise<T | undefined> | T | undefined,
  boundMs: number,
  container?: Container,
): Promise<T> {
  const deadline = Date.now() + boundMs;
  for (;;) {
    const value = await read();
    if (value !== undefined) return value;
    if (container && container.buildah.exitCode !== null)
      throw new Error(
        `${what}: the container exited with ${container.buildah.exitCode}:\n${container.output.join('')}`,
      );
    if (Date.now() > deadline)
      throw new Error(
        `timed out waiting for ${what}${container ? `:\n${container.output.join('').slice(-4000)}` : ''}`,
      );
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** The ids of the images that these names tag now (none for a name that tags nothing). */
async function imageIds(names: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const name of names) {
    const found = await run('podman', ['image', 'inspect', '--format', '{{.Id}}', name]).catch(() => undefined);
    if (found) ids.push(found.stdout.trim());
  }
  return ids;
}

/**
 * Where this machine's npm trusts an extra CA (a TLS-intercepting proxy to the npm registry), the
 * build's npm is given the same file: mounted read-only into the RUN steps, named by the
 * Dockerfile's NODE_EXTRA_CA_CERTS build argument.
 */
function caArgs(): string[] {
  const file = process.env.NODE_EXTRA_CA_CERTS;
  if (!file || !existsSync(file)) return [];
  return ['--volume', `${file}:/run/build-ca.crt:ro`, '--build-arg', 'NODE_EXTRA_CA_CERTS=/run/build-ca.crt'];
}

/**
 * The open files of the build's RUN steps: under chroot isolation buildah gives them 1,024, too
 * few for `npm ci` filling an empty npm cache (it fails with EMFILE), so they get this process's
 * own hard limit (more would need a privilege these machines do not give).
 */
function openFilesArgs(): string[] {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((row) => row.startsWith('Max open files'));
  const hard = line?.trim().split(/\s+/)[4];
  return hard !== undefined && /^\d+$/.test(hard) ? ['--ulimit', `nofile=${hard}:${hard}`] : [];
}

/** Containers of this test left by a run that was killed (named with its process id). */
async function removeLeftContainers(): Promise<void> {
  const names = (await run('buildah', ['containers', '--format', '{{.ContainerName}}'])).stdout.split('\n');
  for (const name of names) {
    const pid = /^payment-routing-test-.*-(\d+)$/.exec(name.trim())?.[1];
    if (pid !== undefined && !alive(Number(pid))) await run('buildah', ['rm', name.trim()]).catch(() => undefined);
  }
}

beforeAll(async () => {
  await run('bash', ['test/setup/install-podman.sh'], 10 * 60_000);
  await removeLeftContainers();
  const made = await run('bash', ['test/image/make-base-image.sh'], 20 * 60_000);
  const base = made.stdout.trim().split('\n').at(-1) ?? '';
  expect(base).toMatch(/^localhost\/payment-routing-base:bookworm-node22\./);
  const previous = await imageIds([BUILD_STAGE, IMAGE]);
  const started = performance.now();
  const buildArgs = [
    ...['--isolation', 'chroot', '--format', 'docker', '--build-arg', `BASE=${base}`],
    ...openFilesArgs(),
    ...caArgs(),
  ];
  await run('podman', ['build', ...buildArgs, '--target', 'build', '-t', BUILD_STAGE, '.'], BUILD_BOUND_MS);
  await run('podman', ['build', ...buildArgs, '-t', IMAGE, '.'], BUILD_BOUND_MS);
  buildMs = performance.now() - started;
  // The images these tags named before, with their layers that nothing else uses: a run leaves
  // the current images alone on disk, not one more install per change of the lock file.
  const current = await imageIds([BUILD_STAGE, IMAGE]);
  for (const id of previous) if (!current.includes(id)) await run('podman', ['rmi', id]).catch(() => undefined);
  // buildah's view of the image keeps the docker format's HEALTHCHECK, which podman's omits.
  const inspected = JSON.parse((await run('buildah', ['inspect', '--type', 'image', IMAGE])).stdout) as {
    Docker: { config: ImageConfig };
  };
  config = inspected.Docker.config;
  imageBytes = Number((await run('podman', ['image', 'inspect', '--format', '{{.Size}}', IMAGE])).stdout.trim());
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE }, v2Targets: false });
  database = await createEmptyTestDatabase('image');
}, SETUP_BOUND_MS);

afterAll(async () => {
  for (const container of running) if (container.buildah.exitCode === null) container.buildah.kill('SIGKILL');
  for (const name of containers) await run('buildah', ['rm', name]).catch(() => undefined);
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
}, STOP_BOUND_MS * 2);

describe('the container image', () => {
  it('runs as a non-root user under tini, with a HEALTHCHECK on /health/ready and the API as its command', () => {
    expect(config.User).toBe('service');
    expect(config.Entrypoint.slice(0, 3)).toEqual(['/usr/bin/tini', '--', 'node']);
    expect(config.Cmd).toEqual(['dist/main.js']);
    expect(config.Env).toContain('NODE_ENV=production');
    expect(Object.keys(config.ExposedPorts ?? {})).toEqual(['3000/tcp']);
    expect(config.Healthcheck?.Test.join(' ')).toContain('/health/ready');
  });

  it(
    'an API and a worker started at once on an empty database serve a paid /proxy call, and stop on SIGTERM or SIGINT with exit code 0',
    async () => {
      const apiPort = await freePort();
      const workerPort = await freePort();
      const common = { ...peersEnv(peers), DATABASE_URL: database.url, HOST: '127.0.0.1', LOG_LEVEL: 'info' };
      const apiEnv = { ...common, PORT: String(apiPort), RUN_WORKER: 'false' };
      const workerEnv = { ...common, WORKER_PORT: String(workerPort) };

      // Nothing listens yet: the HEALTHCHECK says so.
      expect(await healthy(apiEnv)).toBe(false);
      const startedAt = performance.now();
      const [api, worker] = await Promise.all([
        startContainer('api', apiEnv, config.Cmd),
        startContainer('worker', workerEnv, ['dist/main.js', '--worker-only']),
      ]);
      const client: ContractClient = contractClient(`http://127.0.0.1:${apiPort}`);
      await until(
        'the API ready',
        async () => {
          // Refused until it listens; an answer that breaks the document fails at once.
          const ready = await client.get('/health/ready').catch((error: unknown) => {
            if (error instanceof ContractViolation) throw error;
            return undefined;
          });
          return ready?.status === 200 ? ready : undefined;
        },
        READY_BOUND_MS,
        api,
      );
      const startMs = performance.now() - startedAt;
      // The image's own HEALTHCHECK, run in the image, for each.
      expect(await healthy(apiEnv)).toBe(true);
      await until(
        'the worker healthy',
        async () => ((await healthy(workerEnv)) ? true : undefined),
        READY_BOUND_MS,
        worker,
      );

      // Not root: tini's child is node, running as the image's user.
      for (const container of [api, worker]) {
        const tree = descendants(container.buildah.pid!);
        const tini = tree.find((row) => row.command.startsWith('/usr/bin/tini'));
        expect(tini, container.output.join('')).toBeDefined();
        const node = tree.find((row) => row.ppid === tini!.pid);
        expect(node?.command).toMatch(/^node .*dist\/main\.js/);
        expect(uidOf(node!.pid)).not.toBe(0);
      }

      // The operator commands inside the image: an organisation, its key, its credits.
      const adminEnv = { DATABASE_URL: database.url, LOG_LEVEL: 'warn' };
      const created = await exec('admin-org', adminEnv, ['dist/admin.js', 'create-org', '--name', 'Container image']);
      const organisationId = /organisation (\d+) created/.exec(created)?.[1];
      expect(organisationId, created).toBeDefined();
      const keyOutput = await exec('admin-key', adminEnv, ['dist/admin.js', 'create-key', '--org', organisationId!]);
      const key = keyOutput.trim().split('\n').at(-1)!;
      await exec('admin-grant', adminEnv, [
        'dist/admin.js',
        'grant',
        '--org',
        organisationId!,
        '--credits',
        String(GRANTED),
      ]);

      const target = peers.targets[NETWORK]!;
      const payTo = target.routes.paid.payTo;
      const service = peers.wallets.service.evm.address;
      const before = {
        service: await peers.usdcBalance(NETWORK, service),
        target: await peers.usdcBalance(NETWORK, payTo),
      };
      const paid = await client.post(
        '/proxy',
        { api_url: target.routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': key } },
      );
      expect(paid.status, paid.text).toBe(200);
      expect(paid.body).toEqual({ ok: true, route: 'paid', target: NETWORK, network: NETWORK });
      const settlement = decodePaymentResponseHeader(paid.headers.get('x-payment-response'));
      expect(settlement).toMatchObject({ ok: true, value: { success: true, network: NETWORK, payer: service } });
      // Read from the chain: the target got exactly the price, from our wallet.
      expect(await peers.usdcBalance(NETWORK, payTo)).toBe(before.target + PRICE);
      expect(await peers.usdcBalance(NETWORK, service)).toBe(before.service - PRICE);
      expect(await organisationBalance(database.handle.db, BigInt(organisationId!))).toBe(GRANTED - CREDITS);

      // SIGTERM (as `docker stop` sends it) or SIGINT to each container's first process.
      for (const [container, signal] of [
        [api, 'SIGTERM'],
        [worker, 'SIGINT'],
      ] as const) {
        const tini = descendants(container.buildah.pid!).find((row) => row.command.startsWith('/usr/bin/tini'))!;
        const tree = [tini, ...descendants(tini.pid)];
        expect(tree.length).toBeGreaterThan(1);
        process.kill(tini.pid, signal);
        const code = await Promise.race([
          container.exited,
          new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), STOP_BOUND_MS)),
        ]);
        expect(code, container.output.join('').slice(-4000)).toBe(0);
        expect(tree.filter((row) => alive(row.pid))).toEqual([]);
      }

      const megabytes = (imageBytes / 1_000_000).toFixed(0);
      console.log(
        `container image: ${megabytes} MB; built in ${(buildMs / 1000).toFixed(1)} s (layers cached from earlier runs count as built); ` +
          `API ready ${(startMs / 1000).toFixed(1)} s after \`buildah run\` (worker started alongside, both migrating an empty database)`,
      );
    },
    10 * 60_000,
  );
});
