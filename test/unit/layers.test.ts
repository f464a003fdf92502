/**
 * The production layers (server, handlers, payments, worker, db) import nothing from test/ or
 * devnet/ and no development package: a production install (`npm ci --omit=dev`) has neither.
 * The one way to the sandbox is the guarded dynamic import in server/sandbox.ts.
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../payments/basics/config';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PRODUCTION_FOLDERS = ['server', 'mcp', 'handlers', 'payments', 'worker', 'db'];
const manifest = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
/** The guarded loader of the sandbox, and what it may load. */
const SANDBOX_LOADER = { file: 'server/sandbox.ts', specifier: '../devnet/sandbox' };

function sourceFiles(folder: string): string[] {
  return readdirSync(path.join(ROOT, folder)).flatMap((name) => {
    const relative = path.join(folder, name);
    if (statSync(path.join(ROOT, relative)).isDirectory()) return sourceFiles(relative);
    return /\.(ts|mts|js|mjs|cjs)$/.test(name) ? [relative] : [];
  });
}

export interface ImportSite {
  file: string;
  specifier: string;
  typeOnly: boolean;
  dynamic: boolean;
}

export function importsOf(file: string, source: string): ImportSite[] {
  const sites: ImportSite[] = [];
  const statement = /^\s*(import|export)\s+(type\s+)?[^;]*?\sfrom\s+['"]([^'"]+)['"]/gm;
  for (const match of source.matchAll(statement))
    sites.push({ file, specifier: match[3]!, typeOnly: Boolean(match[2]), dynamic: false });
  for (const match of source.matchAll(/^\s*import\s+['"]([^'"]+)['"]/gm))
    sites.push({ file, specifier: match[1]!, typeOnly: false, dynamic: false });
  for (const match of source.matchAll(/(?:\bimport|\brequire)\(\s*['"]([^'"]+)['"]\s*\)/g)) {
    const typeOnly = /typeof\s+$/.test(source.slice(0, match.index));
    sites.push({ file, specifier: match[1]!, typeOnly, dynamic: !typeOnly });
  }
  return sites;
}

function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

function problems(sites: ImportSite[]): string[] {
  const found: string[] = [];
  const builtins = new Set(builtinModules);
  for (const site of sites) {
    const where = `${site.file} imports '${site.specifier}'`;
    if (site.specifier.startsWith('.')) {
      const target = path.relative(ROOT, path.resolve(ROOT, path.dirname(site.file), site.specifier));
      const top = target.split(path.sep)[0];
      if (top === 'test') found.push(`${where}: test code`);
      if (top === 'devnet') {
        const guarded = site.file === SANDBOX_LOADER.file && site.specifier === SANDBOX_LOADER.specifier;
        if (!guarded && !site.typeOnly)
          found.push(`${where}: the local peers (devnet/) are loaded only by ${SANDBOX_LOADER.file}`);
      }
      continue;
    }
    if (site.specifier.startsWith('node:') || builtins.has(site.specifier)) continue;
    if (site.typeOnly && site.specifier.startsWith('@types/')) continue;
    const name = packageName(site.specifier);
    if (manifest.dependencies[name] === undefined) {
      found.push(
        `${where}: ${name} is ${manifest.devDependencies[name] ? 'a development package' : 'not a declared dependency'}`,
      );
    }
  }
  return found;
}

describe('production layers', () => {
  const sites = PRODUCTION_FOLDERS.flatMap(sourceFiles).flatMap((file) =>
    importsOf(file, readFileSync(path.join(ROOT, file), 'utf8')),
  );

  it('read the imports of every production file', () => {
    expect(sites.length).toBeGreaterThan(100);
    expect(
      sites.some(
        (site) => site.file === SANDBOX_LOADER.file && site.specifier === SANDBOX_LOADER.specifier && site.dynamic,
      ),
    ).toBe(true);
  });

  it('import nothing from test/ or devnet/ and no development package', () => {
    expect(problems(sites)).toEqual([]);
  });

  it('would catch each kind of leak', () => {
    const leaks: ImportSite[] = [
      { file: 'server/main.ts', specifier: '../test/support/service', typeOnly: false, dynamic: false },
      { file: 'payments/incoming/settle.ts', specifier: '../../devnet/index', typeOnly: false, dynamic: true },
      { file: 'server/app.ts', specifier: 'x402-fetch', typeOnly: false, dynamic: true },
      {
        file: 'db/index.ts',
        specifier: 'hardhat/internal/core/providers/construction',
        typeOnly: false,
        dynamic: false,
      },
      { file: 'worker/index.ts', specifier: 'left-pad', typeOnly: false, dynamic: false },
    ];
    expect(problems(leaks)).toHaveLength(leaks.length);
    expect(
      importsOf(
        'x.ts',
        "import { a } from 'x402';\nconst b = await import('litesvm');\nexport { c } from '../test/c';",
      ),
    ).toEqual([
      { file: 'x.ts', specifier: 'x402', typeOnly: false, dynamic: false },
      { file: 'x.ts', specifier: '../test/c', typeOnly: false, dynamic: false },
      { file: 'x.ts', specifier: 'litesvm', typeOnly: false, dynamic: true },
    ]);
  });
});

describe('production code carries no test hooks', () => {
  // Tests stop a request between two steps through its peers (a fault proxy holding a request);
  // nothing in the configuration or in the production folders can make a service wait for a test.
  const HOOK_TRACES = /RELAY_PAUSE_AFTER_SETTLEMENT_FILE|relayPauseAfterSettlement|pauseForTest|testHook/;

  it('no production file mentions the former file-based pause', () => {
    const mentions = PRODUCTION_FOLDERS.flatMap(sourceFiles).filter((file) =>
      HOOK_TRACES.test(readFileSync(path.join(ROOT, file), 'utf8')),
    );
    expect(mentions).toEqual([]);
  });

  it('the configuration ignores RELAY_PAUSE_AFTER_SETTLEMENT_FILE, in production too', () => {
    const base = { NODE_ENV: 'production', NETWORKS: 'base-sepolia' };
    const config = loadConfig({ ...base, RELAY_PAUSE_AFTER_SETTLEMENT_FILE: '/tmp/settled' });
    expect(config).toEqual(loadConfig(base));
    expect(
      JSON.stringify(config, (_key, value: unknown) => (typeof value === 'bigint' ? String(value) : value)),
    ).not.toContain('/tmp/settled');
  });

  it('the service takes no hooks: tests stop a request between two steps through its peers', () => {
    const mentions = PRODUCTION_FOLDERS.flatMap(sourceFiles).filter((file) =>
      /\bhooks\??:|\.hooks\b|afterClientSettled/.test(readFileSync(path.join(ROOT, file), 'utf8')),
    );
    expect(mentions).toEqual([]);
  });
});

/**
 * The rooms of payments/ (its top-level folders, and deps.ts) form a graph without cycles, type
 * imports included, and so do its files: a cycle means neither side can be read, tested or moved
 * without the other. A type both sides need goes to a module that imports neither
 * (payments/basics/result.ts, payments/basics/paymentBounds.ts, payments/chains/types.ts).
 */
export function paymentsNodeOf(file: string): string | undefined {
  const parts = file.split(/[\\/]/);
  if (parts[0] !== 'payments' || parts.length < 2) return undefined;
  return parts.length === 2 ? parts[1]! : `${parts[1]}/`;
}

export function folderGraph(sites: ImportSite[]): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  for (const site of sites) {
    const from = paymentsNodeOf(site.file);
    if (from === undefined || !site.specifier.startsWith('.')) continue;
    const target = path.relative(ROOT, path.resolve(ROOT, path.dirname(site.file), site.specifier));
    const to = paymentsNodeOf(target.endsWith('.ts') ? target : `${target}.ts`);
    if (to === undefined || to === from) continue;
    if (!graph.has(from)) graph.set(from, new Set());
    graph.get(from)!.add(to);
  }
  return graph;
}

/** Every cycle's nodes (the strongly connected components of more than one node), each sorted. */
export function cyclesOf(graph: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (node: string) => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1) cycles.push(component.sort());
    }
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return cycles;
}

/** One path around a cycle, for the message: a -> b -> ... -> a. */
function cyclePath(graph: Map<string, Set<string>>, members: string[]): string {
  const inside = new Set(members);
  const start = members[0]!;
  const previous = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const next of graph.get(node) ?? []) {
      if (!inside.has(next)) continue;
      if (next === start) {
        const path = [start];
        for (let at = node; at !== start; at = previous.get(at)!) path.splice(1, 0, at);
        return [...path, start].join(' -> ');
      }
      if (!previous.has(next)) {
        previous.set(next, node);
        queue.push(next);
      }
    }
  }
  return members.join(', ');
}

/**
 * The rooms of payments/ and what each may import (docs/architecture.md, section 1). The arrows run
 * one way: from the paid operations, to the two legs of a payment and what follows money to its
 * end, to an organisation's money, the chains and the protocol, to the basics.
 *
 *   operations/  the paid operations        -> incoming, outgoing, tracking, accounts, deps, chains, x402, basics
 *   tracking/    money followed to its end  -> deps, chains, basics
 *   incoming/    payments we receive        -> deps, accounts (the daily limits), chains, x402, basics
 *   outgoing/    payments we make           -> deps, chains, x402, basics
 *   deps.ts      what every flow is given   -> accounts (the key cache), chains, basics
 *   accounts/    an organisation's money    -> basics
 *   chains/      the chain families         -> x402, basics
 *   x402/        the protocol on the wire   -> basics
 *   basics/      what every room builds on  -> no other room
 *
 * These rules have no cycle among them, so rooms that keep to them cannot form one.
 */
export const ROOMS: Readonly<Record<string, readonly string[]>> = {
  'basics/': [],
  'x402/': ['basics/'],
  'chains/': ['basics/', 'x402/'],
  'accounts/': ['basics/'],
  'deps.ts': ['basics/', 'chains/', 'accounts/'],
  'outgoing/': ['basics/', 'x402/', 'chains/', 'deps.ts'],
  'incoming/': ['basics/', 'x402/', 'chains/', 'accounts/', 'deps.ts'],
  'tracking/': ['basics/', 'chains/', 'deps.ts'],
  'operations/': ['basics/', 'x402/', 'chains/', 'accounts/', 'deps.ts', 'outgoing/', 'incoming/', 'tracking/'],
};

/** Each import that leaves its room for one its rules do not allow, and each room ROOMS does not know. */
export function roomProblems(graph: Map<string, Set<string>>): string[] {
  const problems: string[] = [];
  for (const [from, targets] of graph) {
    const allowed = ROOMS[from];
    if (allowed === undefined) {
      problems.push(`payments/${from} is no room of ROOMS`);
      continue;
    }
    for (const to of targets) if (!allowed.includes(to)) problems.push(`payments/${from} imports payments/${to}`);
  }
  return problems;
}

/** The file a relative specifier names (a folder's index.ts for a folder), repository-relative. */
function resolvedTarget(site: ImportSite): string | undefined {
  if (!site.specifier.startsWith('.')) return undefined;
  const target = path
    .relative(ROOT, path.resolve(ROOT, path.dirname(site.file), site.specifier))
    .split(path.sep)
    .join('/');
  if (/\.(ts|mts|js|mjs|cjs)$/.test(target)) return target;
  const index = `${target}/index.ts`;
  return existsSync(path.join(ROOT, index)) && !existsSync(path.join(ROOT, `${target}.ts`)) ? index : `${target}.ts`;
}

/** The graph of the files of payments/, type imports included. */
export function fileGraph(sites: ImportSite[]): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  for (const site of sites) {
    const from = site.file.split(path.sep).join('/');
    const to = resolvedTarget(site);
    if (to === undefined || !to.startsWith('payments/') || to === from) continue;
    if (!graph.has(from)) graph.set(from, new Set());
    graph.get(from)!.add(to);
  }
  return graph;
}

/**
 * The chain families (chains/evm/, chains/solana/) import their own folder, the shared modules of
 * chains/ and the rooms below; never another family, nor the registry that imports them
 * (chains/registry.ts, chains/index.ts). Shared chain code names no family, with one exception:
 * chains/uptoIncoming.ts types the upto side of ChainFamily by its one implementation
 * (chains/evm/uptoIncoming/), which imports it back by type only.
 */
const FAMILY_FOLDER = /^payments\/chains\/(evm|solana)\//;
const REGISTRY = ['payments/chains/registry.ts', 'payments/chains/index.ts'];
const NAMES_A_FAMILY = [...REGISTRY, 'payments/chains/uptoIncoming.ts'];

export function familyProblems(graph: Map<string, Set<string>>): string[] {
  const problems: string[] = [];
  for (const [from, targets] of graph) {
    const family = FAMILY_FOLDER.exec(from)?.[1];
    for (const to of targets) {
      const targetFamily = FAMILY_FOLDER.exec(to)?.[1];
      if (family !== undefined && targetFamily !== undefined && targetFamily !== family)
        problems.push(`${from} imports another family: ${to}`);
      if (family !== undefined && REGISTRY.includes(to)) problems.push(`${from} imports the registry: ${to}`);
      const shared = family === undefined && from.startsWith('payments/chains/') && !NAMES_A_FAMILY.includes(from);
      if (shared && targetFamily !== undefined)
        problems.push(`${from} is shared chain code and imports a family: ${to}`);
    }
  }
  return problems;
}

describe('the rooms of payments/', () => {
  const sites = sourceFiles('payments').flatMap((file) => importsOf(file, readFileSync(path.join(ROOT, file), 'utf8')));
  const graph = folderGraph(sites);
  const files = fileGraph(sites);

  it('read the imports between the rooms and between the files', () => {
    expect(graph.get('incoming/')?.has('chains/')).toBe(true);
    expect(graph.get('operations/')?.has('outgoing/')).toBe(true);
    expect(files.get('payments/operations/relay/call.ts')?.has('payments/operations/relay/uptoClient.ts')).toBe(true);
    expect(files.get('payments/chains/index.ts')?.has('payments/chains/evm/index.ts')).toBe(true);
  });

  it('are the rooms of ROOMS, and nothing else is at the top of payments/', () => {
    const entries = readdirSync(path.join(ROOT, 'payments')).map((name) =>
      statSync(path.join(ROOT, 'payments', name)).isDirectory() ? `${name}/` : name,
    );
    expect(entries.sort()).toEqual(Object.keys(ROOMS).sort());
  });

  it('import only the rooms their rules allow', () => {
    expect(roomProblems(graph)).toEqual([]);
  });

  it('import each other without a cycle', () => {
    expect(cyclesOf(graph).map((members) => cyclePath(graph, members))).toEqual([]);
  });

  it('hold no import circle between their files, type imports included', () => {
    expect(cyclesOf(files).map((members) => cyclePath(files, members))).toEqual([]);
  });

  it('keep each chain family to itself and the shared chain modules', () => {
    expect(familyProblems(files)).toEqual([]);
  });

  it('would name a file circle, an import its room may not make, and a family leaking', () => {
    const looped = fileGraph([
      { file: 'payments/chains/types.ts', specifier: './index', typeOnly: true, dynamic: false },
      { file: 'payments/chains/index.ts', specifier: './evm', typeOnly: false, dynamic: false },
      { file: 'payments/chains/evm/index.ts', specifier: '../types', typeOnly: true, dynamic: false },
    ]);
    expect(cyclesOf(looped).map((members) => cyclePath(looped, members))).toEqual([
      'payments/chains/evm/index.ts -> payments/chains/types.ts -> payments/chains/index.ts -> payments/chains/evm/index.ts',
    ]);
    const rooms = new Map([
      ['basics/', new Set(['chains/'])],
      ['chains/', new Set(['x402/'])],
      ['ledger/', new Set(['basics/'])],
    ]);
    expect(roomProblems(rooms)).toEqual([
      'payments/basics/ imports payments/chains/',
      'payments/ledger/ is no room of ROOMS',
    ]);
    const leaks = new Map([
      ['payments/chains/evm/verify.ts', new Set(['payments/chains/solana/verify.ts', 'payments/chains/registry.ts'])],
      ['payments/chains/family.ts', new Set(['payments/chains/evm/index.ts'])],
    ]);
    expect(familyProblems(leaks)).toEqual([
      'payments/chains/evm/verify.ts imports another family: payments/chains/solana/verify.ts',
      'payments/chains/evm/verify.ts imports the registry: payments/chains/registry.ts',
      'payments/chains/family.ts is shared chain code and imports a family: payments/chains/evm/index.ts',
    ]);
  });

  it('would name a cycle between rooms', () => {
    const looped = folderGraph([
      { file: 'payments/deps.ts', specifier: './incoming/queue', typeOnly: true, dynamic: false },
      { file: 'payments/incoming/evm.ts', specifier: '../deps', typeOnly: true, dynamic: false },
      { file: 'payments/x402/types.ts', specifier: '../chains/index', typeOnly: false, dynamic: false },
      { file: 'payments/chains/evm.ts', specifier: '../config', typeOnly: false, dynamic: false },
      { file: 'payments/config.ts', specifier: './x402/types', typeOnly: true, dynamic: false },
      { file: 'payments/proxy/call.ts', specifier: '../outgoing/index', typeOnly: false, dynamic: false },
    ]);
    expect(
      cyclesOf(looped)
        .map((members) => cyclePath(looped, members))
        .sort(),
    ).toEqual(['chains/ -> config.ts -> x402/ -> chains/', 'deps.ts -> incoming/ -> deps.ts']);
  });
});
