/**
 * Child processes of the bench, each pinned to one core with taskset (the server side on one
 * core, the load generator on the other), talking to the bench over Node's IPC channel.
 *
 * A child script calls serveChild(handlers): it announces {type: 'ready', info} and answers each
 * {id, type, ...} the bench sends with {id, ok, result} or {id, ok: false, error}.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

let pinning: boolean | undefined;

/** True when `taskset -c 0` and `-c 1` work here (taskset installed and two cores available). */
export function pinningAvailable(): boolean {
  if (pinning === undefined) {
    const probe = (core: number) =>
      spawnSync('taskset', ['-c', String(core), 'true'], { stdio: 'ignore', timeout: 5_000 }).status === 0;
    pinning = probe(0) && probe(1);
  }
  return pinning;
}

export function disablePinning(): void {
  pinning = false;
}

export { freePort } from '../../db/embedded';

export interface Child {
  name: string;
  process: ChildProcess;
  pid: number;
  /** What the child announced with its ready message (IPC children only). */
  info: unknown;
  /** Resolves with what the child's handler returned; T is taken on trust (it crossed IPC). */
  call<T = unknown>(type: string, payload?: Record<string, unknown>, timeoutMs?: number): Promise<T>;
  /** SIGTERM, then SIGKILL after graceMs; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
  exited: Promise<number | null>;
  /** The last lines the child wrote to stderr and stdout, for error messages. */
  output(): string;
}

export interface SpawnOptions {
  name: string;
  /** Core to pin to (taskset -c); undefined or pinning unavailable: unpinned. */
  core?: number;
  script: string;
  args?: string[];
  env?: Record<string, string | undefined>;
  /** Wait for {type: 'ready'} over IPC (child scripts of load/runner); else resolve once spawned. */
  ipc?: boolean;
  readyTimeoutMs?: number;
  /** Extra node flags (e.g. --cpu-prof). */
  nodeFlags?: string[];
  /** Run the script with plain node (built JavaScript), without the tsx loader. */
  plain?: boolean;
  /** Print the child's stderr as it comes (prefixed with its name). */
  echoStderr?: boolean;
  /** Append the child's stdout to this file instead of reading it (logs under load). */
  stdoutFile?: string;
}

const children = new Set<Child>();

/** Starts `node --import tsx <script>` (plain `node <script>` for built JavaScript), pinned when possible. */
export async function spawnChild(options: SpawnOptions): Promise<Child> {
  const nodeArgs = [
    ...(options.nodeFlags ?? []),
    ...(options.plain ? [] : ['--import', 'tsx']),
    path.resolve(ROOT, options.script),
    ...(options.args ?? []),
  ];
  const pinned = options.core !== undefined && pinningAvailable();
  const command = pinned ? 'taskset' : process.execPath;
  const args = pinned ? ['-c', String(options.core), process.execPath, ...nodeArgs] : nodeArgs;
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries({ ...process.env, ...options.env }))
    if (value !== undefined) env[name] = value;
  const stdout = options.stdoutFile ? openSync(options.stdoutFile, 'a') : 'pipe';
  const child = spawn(command, args, {
    cwd: ROOT,
    env,
    stdio: options.ipc ? ['ignore', stdout, 'pipe', 'ipc'] : ['ignore', stdout, 'pipe'],
  });
  if (typeof stdout === 'number') closeSync(stdout);
  const tail: string[] = [];
  const keep = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) tail.push(line);
    if (tail.length > 40) tail.splice(0, tail.length - 40);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', (chunk: Buffer) => {
    keep(chunk);
    if (options.echoStderr) process.stderr.write(chunk.toString('utf8').replace(/^(?=.)/gm, `[${options.name}] `));
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const pending = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }
  >();
  let nextId = 1;
  let readyResolve: (info: unknown) => void = () => {};
  const ready = new Promise<unknown>((resolve) => {
    readyResolve = resolve;
  });
  child.on('message', (message: unknown) => {
    if (!isRecord(message)) return;
    if (message.type === 'ready') {
      readyResolve(message.info);
      return;
    }
    if (typeof message.id !== 'number') return;
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    clearTimeout(waiter.timer);
    if (message.ok) waiter.resolve(message.result);
    else waiter.reject(new Error(`${options.name}: ${String(message.error)}`));
  });
  void exited.then((code) => {
    for (const waiter of pending.values()) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(`${options.name} exited (code ${code}) during a call:\n${tail.join('\n')}`));
    }
    pending.clear();
  });

  const pid = child.pid;
  if (pid === undefined) throw new Error(`${options.name} did not start (${command} ${args.join(' ')})`);
  const handle: Child = {
    name: options.name,
    process: child,
    pid,
    info: undefined,
    exited,
    output: () => tail.join('\n'),
    call<T>(type: string, payload: Record<string, unknown> = {}, timeoutMs = 120_000) {
      return new Promise<T>((resolve, reject) => {
        const id = nextId++;
        const timer = setTimeout(() => {
          pending.delete(id);
          reject(new Error(`${options.name}: ${type} did not answer within ${timeoutMs} ms`));
        }, timeoutMs);
        pending.set(id, { resolve: (value) => resolve(value as T), reject, timer });
        child.send({ id, type, ...payload });
      });
    },
    async stop(graceMs = 15_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
      children.delete(handle);
    },
  };
  children.add(handle);
  if (options.ipc) {
    const timeoutMs = options.readyTimeoutMs ?? 60_000;
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      ready.then((info) => ({ info })),
      exited.then((code) => ({ exited: code })),
      new Promise<{ timeout: true }>((resolve) => {
        timer = setTimeout(() => resolve({ timeout: true }), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!('info' in outcome)) {
      await handle.stop(2_000);
      const why = 'timeout' in outcome ? `was not ready within ${timeoutMs} ms` : `exited with code ${outcome.exited}`;
      throw new Error(`${options.name} ${why}:\n${tail.join('\n')}`);
    }
    handle.info = outcome.info;
  }
  return handle;
}

/** Stops every child this process started (last started first). */
export async function stopAllChildren(): Promise<void> {
  for (const child of [...children].reverse()) await child.stop().catch(() => {});
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** The url a server child announced in its ready message ({url, ...}). */
export function announcedUrl(child: Child): string {
  const info = child.info;
  if (isRecord(info) && typeof info.url === 'string') return info.url;
  throw new Error(`${child.name} announced no url (it announced ${JSON.stringify(info)})`);
}

/**
 * Answers the calls of one type: the message is the call's payload with its id and type, as the
 * bench sent it (each handler declares the payload it reads; it crossed IPC and is taken on trust).
 */
type Handler = (message: never) => unknown;

/** For child scripts: announce readiness and answer the bench's calls; exits when the bench goes away. */
export function serveChild(
  handlers: Record<string, Handler>,
  info: unknown = {},
  onStop?: () => void | Promise<void>,
): void {
  const stop = async () => {
    try {
      await onStop?.();
    } finally {
      process.exit(0);
    }
  };
  if (!process.send) {
    // Started by hand (no IPC channel): say where it is and run until stopped.
    process.stdout.write(`${JSON.stringify(info)}\n`);
    process.on('SIGTERM', () => void stop());
    process.on('SIGINT', () => void stop());
    return;
  }
  const send = process.send.bind(process);
  process.on('message', (message: unknown) => {
    const call: Record<string, unknown> = isRecord(message) ? message : {};
    const handler = typeof call.type === 'string' ? handlers[call.type] : undefined;
    if (!handler) {
      send({ id: call.id, ok: false, error: `unknown call ${String(call.type)}` });
      return;
    }
    Promise.resolve()
      .then(() => handler(call as never))
      .then(
        (result: unknown) => send({ id: call.id, ok: true, result }),
        (error: unknown) =>
          send({
            id: call.id,
            ok: false,
            error: error instanceof Error ? (error.stack ?? error.message) : String(error),
          }),
      );
  });
  process.on('disconnect', () => void stop());
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
  process.send({ type: 'ready', info });
}

/** Resident set size of a process in MiB (from /proc), undefined when it is gone. */
export function rssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /VmRSS:\s+(\d+) kB/.exec(status);
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

const TICKS_PER_SECOND = 100;

function statOf(pid: number): { ppid: number; cpuMs: number; reapedCpuMs: number } | undefined {
  try {
    const afterName = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1];
    if (afterName === undefined) return undefined;
    const fields = afterName.split(' ');
    // After "pid (comm) ": state is field 3, ppid 4, utime 14 and stime 15, cutime 16 and cstime
    // 17 (1-based, as in proc(5)): the last two are the time of the children it has reaped.
    const ms = (...indexes: number[]) =>
      (indexes.reduce((sum, index) => sum + Number(fields[index]), 0) * 1000) / TICKS_PER_SECOND;
    return { ppid: Number(fields[1]), cpuMs: ms(11, 12), reapedCpuMs: ms(13, 14) };
  } catch {
    return undefined;
  }
}

/**
 * CPU time of a live process's threads in milliseconds, to the nanosecond: the sum of each
 * thread's /proc/<pid>/task/<tid>/schedstat (time on a CPU), undefined when it cannot be read.
 * /proc/<pid>/stat counts in 10 ms ticks: over a run of 60 paid calls that is 0.17 ms per call,
 * as large as the budgets measured with it. Threads that exited take their time with them (a
 * Node process keeps its threads; a Postgres backend has only one).
 */
function scheduledMs(pid: number): number | undefined {
  try {
    let totalNs = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const thread = threadSchedNs(pid, Number(tid));
      if (thread === undefined) return undefined;
      totalNs += thread.onCpuNs;
    }
    return totalNs / 1e6;
  } catch {
    return undefined;
  }
}

/**
 * One thread's /proc/<pid>/task/<tid>/schedstat: its time on a CPU and its time runnable but
 * waiting for one (another process on its core), in nanoseconds; undefined when it cannot be read.
 */
function threadSchedNs(pid: number, tid: number): { onCpuNs: number; waitingNs: number } | undefined {
  try {
    const [onCpuNs, waitingNs] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ').map(Number);
    if (onCpuNs === undefined || waitingNs === undefined || !Number.isFinite(onCpuNs) || !Number.isFinite(waitingNs))
      return undefined;
    return { onCpuNs, waitingNs };
  } catch {
    return undefined;
  }
}

/** A process's main thread (where a V8 CPU profile samples): threadSchedNs in milliseconds. */
export function mainThreadSchedMs(pid: number): { onCpuMs: number; waitingMs: number } | undefined {
  const thread = threadSchedNs(pid, pid);
  return thread && { onCpuMs: thread.onCpuNs / 1e6, waitingMs: thread.waitingNs / 1e6 };
}

/** CPU time (user + system) a process has used so far, in milliseconds (schedstat; else /proc/<pid>/stat's 10 ms ticks). */
export function cpuMs(pid: number): number | undefined {
  return scheduledMs(pid) ?? statOf(pid)?.cpuMs;
}

/** CPU time of a process since it started, exited threads included, in 10 ms ticks (/proc/<pid>/stat). */
export function lifetimeCpuMs(pid: number): number | undefined {
  return statOf(pid)?.cpuMs;
}

/**
 * CPU time of a process's descendants (the service's embedded Postgres: its server and backends),
 * in milliseconds: each live one's own, and the time of those that exited, which the process
 * that reaped them holds (the Postgres server reaps its backends and autovacuum workers).
 */
export function descendantsCpuMs(pid: number): number {
  const parents = new Map<number, NonNullable<ReturnType<typeof statOf>>>();
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    const stat = statOf(Number(entry));
    if (stat) parents.set(Number(entry), stat);
  }
  let total = 0;
  for (const [id, stat] of parents) {
    for (let ancestor = stat.ppid; ancestor > 1; ancestor = parents.get(ancestor)?.ppid ?? 0) {
      if (ancestor === pid) {
        total += (scheduledMs(id) ?? stat.cpuMs) + stat.reapedCpuMs;
        break;
      }
    }
  }
  return total;
}
