/**
 * Summary of a V8 CPU profile (node --cpu-prof): self time by function and by origin (our code by
 * folder, dependencies by package, Node internals), to see what of a request's CPU is ours.
 *
 *   npx tsx load/runner/profile.ts <file.cpuprofile> [top]
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { entryOf, itemAt } from './checked';
import { ROOT } from './children';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  byOrigin: Array<{ origin: string; ms: number; share: number }>;
  byFunction: Array<{ fn: string; origin: string; ms: number; share: number }>;
  /** Our functions by inclusive time (their synchronous callees included). */
  oursInclusive: Array<{ fn: string; ms: number; share: number }>;
  /**
   * Self time charged to the nearest caller that is a dependency or one of our files: Node's and
   * V8's work (sockets, buffers, the HTTP parser, fetch) counts for the code that asked for it.
   */
  byCaller: Array<{ caller: string; ms: number; share: number }>;
}

/** The nearest frame that is a dependency (by package) or ours (by file), from a sample's leaf up. */
function callerOf(id: number, byId: Map<number, ProfileNode>, parent: Map<number, number>): string {
  for (let current: number | undefined = id; current !== undefined; current = parent.get(current)) {
    const node = entryOf(byId, current, 'the nodes of the profile');
    const origin = originOf(node.callFrame.url);
    if (origin.startsWith('dep:')) return origin;
    if (origin.startsWith('ours:')) return `ours: ${path.relative(ROOT, node.callFrame.url.replace(/^file:\/\//, ''))}`;
  }
  const leaf = entryOf(byId, id, 'the nodes of the profile');
  if (leaf.callFrame.functionName === '(garbage collector)') return 'gc';
  return originOf(leaf.callFrame.url) === 'node internals'
    ? 'node internals (no caller of ours)'
    : '(native, no caller)';
}

export function originOf(url: string): string {
  if (!url) return '(native/gc/idle)';
  if (url.startsWith('node:')) return 'node internals';
  // WebAssembly: in practice undici's HTTP parser (llhttp), behind fetch.
  if (url.startsWith('wasm:')) return 'wasm (undici)';
  const file = url.startsWith('file://') ? decodeURIComponent(new URL(url).pathname) : url;
  const modules = file.lastIndexOf('/node_modules/');
  if (modules >= 0) {
    const rest = file.slice(modules + '/node_modules/'.length).split('/');
    const first = itemAt(rest, 0, 'the path under node_modules');
    return `dep: ${first.startsWith('@') ? `${first}/${rest[1]}` : first}`;
  }
  const relative = path.relative(ROOT, file);
  if (relative.startsWith('..')) return 'other';
  return `ours: ${relative.split(path.sep)[0]}/`;
}

/**
 * Only the samples of a window, given in milliseconds before the end of the profile (the process
 * exit): the bench profiles the load, not the start of the process.
 */
export interface ProfileWindow {
  fromMsBeforeEnd: number;
  toMsBeforeEnd: number;
}

export function summarizeProfile(file: string, top = 25, window?: ProfileWindow): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfUs = new Map<number, number>();
  const from = window ? profile.endTime - window.fromMsBeforeEnd * 1000 : -Infinity;
  const to = window ? profile.endTime - window.toMsBeforeEnd * 1000 : Infinity;
  let at = profile.startTime;
  for (let index = 0; index < profile.samples.length; index += 1) {
    at += profile.timeDeltas[index] ?? 0;
    if (at < from || at > to) continue;
    const id = itemAt(profile.samples, index, 'the samples of the profile');
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0));
  }
  // Inclusive time of our own functions (synchronous part: awaited continuations run elsewhere).
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const keyOf = (node: ProfileNode) =>
    `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url ? `${path.relative(ROOT, node.callFrame.url.replace(/^file:\/\//, ''))}:${node.callFrame.lineNumber + 1}` : ''}`.trim();
  const inclusiveUs = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const seen = new Set<string>();
    for (let current: number | undefined = id; current !== undefined; current = parent.get(current)) {
      const node = entryOf(byId, current, 'the nodes of the profile');
      if (!originOf(node.callFrame.url).startsWith('ours')) continue;
      const key = keyOf(node);
      if (seen.has(key)) continue;
      seen.add(key);
      inclusiveUs.set(key, (inclusiveUs.get(key) ?? 0) + us);
    }
  }
  let totalUs = 0;
  let idleUs = 0;
  const origins = new Map<string, number>();
  const callers = new Map<string, number>();
  const functions = new Map<string, { origin: string; us: number }>();
  for (const [id, us] of selfUs) {
    const node = entryOf(byId, id, 'the nodes of the profile');
    const name = node.callFrame.functionName;
    if (name === '(idle)' || name === '(program)') {
      idleUs += name === '(idle)' ? us : 0;
      if (name === '(idle)') continue;
    }
    totalUs += us;
    const origin = name === '(garbage collector)' ? 'gc' : originOf(node.callFrame.url);
    origins.set(origin, (origins.get(origin) ?? 0) + us);
    const caller = callerOf(id, byId, parent);
    callers.set(caller, (callers.get(caller) ?? 0) + us);
    const where = node.callFrame.url
      ? `${path.relative(ROOT, node.callFrame.url.replace(/^file:\/\//, ''))}:${node.callFrame.lineNumber + 1}`
      : '';
    const key = `${name || '(anonymous)'} ${where}`.trim();
    const entry = functions.get(key) ?? { origin, us: 0 };
    entry.us += us;
    functions.set(key, entry);
  }
  const share = (us: number) => (totalUs > 0 ? us / totalUs : 0);
  return {
    totalMs: totalUs / 1000,
    idleMs: idleUs / 1000,
    byOrigin: [...origins]
      .map(([origin, us]) => ({ origin, ms: us / 1000, share: share(us) }))
      .sort((a, b) => b.ms - a.ms),
    byFunction: [...functions]
      .map(([fn, entry]) => ({ fn, origin: entry.origin, ms: entry.us / 1000, share: share(entry.us) }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top),
    oursInclusive: [...inclusiveUs]
      .map(([fn, us]) => ({ fn, ms: us / 1000, share: share(us) }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top),
    byCaller: [...callers]
      .map(([caller, us]) => ({ caller, ms: us / 1000, share: share(us) }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top),
  };
}

export function formatProfile(summary: ProfileSummary, requests?: number): string {
  const lines: string[] = [];
  const perRequest = requests
    ? ` (${((summary.totalMs * 1000) / requests).toFixed(0)} us busy per request over ${requests} requests)`
    : '';
  lines.push(`busy ${summary.totalMs.toFixed(0)} ms, idle ${summary.idleMs.toFixed(0)} ms${perRequest}`);
  lines.push('self time by origin:');
  for (const entry of summary.byOrigin.slice(0, 14))
    lines.push(`  ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.origin}`);
  lines.push('self time by the nearest dependency or file of ours on the stack:');
  for (const entry of summary.byCaller.slice(0, 16))
    lines.push(`  ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.caller}`);
  lines.push('top functions (self time):');
  for (const entry of summary.byFunction)
    lines.push(`  ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.fn}  [${entry.origin}]`);
  lines.push('our functions (inclusive time, synchronous part):');
  for (const entry of summary.oursInclusive.slice(0, 15))
    lines.push(`  ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.fn}`);
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, top] = process.argv.slice(2);
  if (!file) {
    process.stderr.write('usage: npx tsx load/runner/profile.ts <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  process.stdout.write(`${formatProfile(summarizeProfile(file, Number(top ?? 25)))}\n`);
}
