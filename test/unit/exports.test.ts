/**
 * A function a production file exports is there for another part of the product: another
 * production file, the local peers (devnet/), the load scripts (load/) or the build (tools/). A
 * function only tests call is tested through the public function production calls instead, and is
 * not exported. Constants and types may stay exported for tests (a bound like MAX_BATCH is part of
 * a module's contract). The few exceptions are listed below, each with its reason.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PRODUCTION_FOLDERS = ['server', 'handlers', 'payments', 'worker', 'db'];
/** Where a production function may be used from; test/ does not count. */
const USER_FOLDERS = [...PRODUCTION_FOLDERS, 'devnet', 'load', 'tools'];

/** Function exports that only tests call, each with its reason. */
const TESTED_ONLY: Record<string, string> = {
  'payments/tracking/float.ts parseAtomic':
    'the floors parsed from decimal text into atomic units, each decimal count and refusal, checked without starting a service',
  'payments/incoming/store.ts recordClientPayment':
    'the tests read the whole row a claimed payment recorded; the product claims the nonce by claimClientPayment, which returns only the id',
  'db/embedded.ts isAlive':
    "the embedded restart test waits for the killed Postgres to be gone by the service's own rule (a zombie is gone)",
  'payments/chains/evm/submit.ts nonceRefusalOf':
    "nodes' wordings of a taken or known nonce, case by case; the local chain produces only some of them",
  'payments/incoming/facilitator.ts settleRequestBody':
    'the exact /settle body of each x402 version, checked in a unit test without a facilitator',
  'server/service.ts answerClientError':
    'socket states a real connection cannot be held in on cue: reset, no longer writable, a response under way',
  'payments/chains/evm/uptoIncoming/payload.ts uptoReplayIdentity':
    'the replay identity of an upto permit on its own; the service names a permit by uptoIdempotencyKey, which reads it',
  'payments/tracking/finality.ts nextFinalityLook':
    'the schedule of looks on its own (a quiet look bounded, never sooner than the usual one); the product reaches it only through a run of the follow job over the database',
  'payments/basics/secp256k1.ts chooseSecp256k1':
    'the equality test of the three implementations takes each by name; the service chooses through selectSecp256k1',
};

function sourceFiles(folder: string): string[] {
  return readdirSync(path.join(ROOT, folder)).flatMap((name) => {
    const relative = path.join(folder, name);
    if (name === 'node_modules') return [];
    if (statSync(path.join(ROOT, relative)).isDirectory()) return sourceFiles(relative);
    return /\.(ts|mts|js|mjs|cjs)$/.test(name) && !name.endsWith('.d.ts') ? [relative] : [];
  });
}

export interface ModuleFacts {
  /** Names of the functions the file exports (function declarations, and consts holding a function). */
  functions: string[];
  /** Relative specifiers the file imports from or re-exports from, statically or dynamically. */
  imports: string[];
  /** Specifiers the file re-exports from (`export * from`, `export { a } from`). */
  reexports: string[];
  /** Specifiers the file imports whole (`import * as m`): every export of those counts as used. */
  wholes: string[];
  /** Every identifier in the file's code (not its comments or strings). */
  identifiers: Set<string>;
}

function exported(node: ts.Node): boolean {
  return ts.canHaveModifiers(node) && (ts.getModifiers(node) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
}

function isFunctionValue(node: ts.Expression | undefined): boolean {
  if (!node) return false;
  while (ts.isParenthesizedExpression(node) || ts.isAsExpression(node) || ts.isSatisfiesExpression(node))
    node = node.expression;
  return ts.isArrowFunction(node) || ts.isFunctionExpression(node);
}

export function factsOf(file: string, source: string): ModuleFacts {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, false);
  const facts: ModuleFacts = { functions: [], imports: [], reexports: [], wholes: [], identifiers: new Set() };
  const specifier = (node: ts.Expression | undefined) =>
    node && ts.isStringLiteral(node) && node.text.startsWith('.') ? node.text : undefined;
  const visit = (node: ts.Node): void => {
    if (ts.isIdentifier(node)) facts.identifiers.add(node.text);
    if (ts.isFunctionDeclaration(node) && node.name && exported(node)) facts.functions.push(node.name.text);
    if (ts.isVariableStatement(node) && exported(node)) {
      for (const declaration of node.declarationList.declarations)
        if (ts.isIdentifier(declaration.name) && isFunctionValue(declaration.initializer))
          facts.functions.push(declaration.name.text);
    }
    if (ts.isImportDeclaration(node)) {
      const from = specifier(node.moduleSpecifier);
      if (from) facts.imports.push(from);
      const bindings = node.importClause?.namedBindings;
      if (
        from &&
        bindings &&
        ts.isNamespaceImport(bindings) &&
        node.importClause.phaseModifier !== ts.SyntaxKind.TypeKeyword
      )
        facts.wholes.push(from);
    }
    if (ts.isExportDeclaration(node)) {
      const from = specifier(node.moduleSpecifier);
      if (from) {
        facts.imports.push(from);
        facts.reexports.push(from);
      }
    }
    if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const from = specifier(node.arguments[0]);
      if (from) facts.imports.push(from);
    }
    if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const from = specifier(node.argument.literal);
      if (from) facts.imports.push(from);
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return facts;
}

const EXTENSIONS = ['', '.ts', '.mts', '.js', '.mjs', '.cjs', '/index.ts', '/index.js'];

/** The file a relative specifier of `from` names, if it is one of `known`. */
function resolve(from: string, spec: string, known: Set<string>): string | undefined {
  const base = path.join(path.dirname(from), spec);
  const candidates = [base.replace(/\.js$/, '.ts'), ...EXTENSIONS.map((extension) => base + extension)];
  return candidates.find((candidate) => known.has(candidate));
}

/**
 * The functions exported by a file of `production` that no other file of `modules` uses. A file
 * uses `name` of `file` when it names it in its code and imports `file`, directly or through files
 * that re-export it, or when it imports `file` whole (the migrations' list).
 */
export function unusedFunctionExports(modules: Map<string, ModuleFacts>, production: string[]): string[] {
  const known = new Set(modules.keys());
  const resolved = (file: string, specs: string[]) => specs.flatMap((spec) => resolve(file, spec, known) ?? []);
  /** The files whose exports `file` sees: those it imports, and what they re-export, transitively. */
  const reached = new Map<string, Set<string>>();
  const reach = (file: string): Set<string> => {
    const cached = reached.get(file);
    if (cached) return cached;
    const seen = new Set<string>();
    const pending = resolved(file, modules.get(file)!.imports);
    for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
      if (seen.has(next)) continue;
      seen.add(next);
      pending.push(...resolved(next, modules.get(next)!.reexports));
    }
    reached.set(file, seen);
    return seen;
  };
  const whole = new Set([...modules].flatMap(([user, facts]) => resolved(user, facts.wholes)));
  const unused: string[] = [];
  for (const file of production) {
    if (whole.has(file)) continue;
    for (const name of modules.get(file)!.functions) {
      const used = [...modules].some(
        ([user, facts]) => user !== file && facts.identifiers.has(name) && reach(user).has(file),
      );
      if (!used) unused.push(`${file} ${name}`);
    }
  }
  return unused.sort();
}

describe('function exports of production files', () => {
  const users = USER_FOLDERS.flatMap(sourceFiles);
  const modules = new Map(users.map((file) => [file, factsOf(file, readFileSync(path.join(ROOT, file), 'utf8'))]));
  const production = users.filter((file) => PRODUCTION_FOLDERS.includes(file.split(path.sep)[0]!));

  it('read the exports of every production file', () => {
    const functions = production.flatMap((file) => modules.get(file)!.functions);
    expect(functions.length).toBeGreaterThan(300);
    expect(functions).toContain('holdProxyPayment');
  });

  it('are each used by another product file, or listed with the reason only tests use them', () => {
    const unused = unusedFunctionExports(modules, production);
    expect(unused.filter((entry) => !(entry in TESTED_ONLY))).toEqual([]);
  });

  it('list no function that is used by the product, or no longer exported', () => {
    const unused = new Set(unusedFunctionExports(modules, production));
    expect(Object.keys(TESTED_ONLY).filter((entry) => !unused.has(entry))).toEqual([]);
  });

  it('would catch a function only tests use, and count uses through re-exports and whole imports', () => {
    const files: Record<string, string> = {
      'payments/a.ts': [
        'export function used() {}',
        'export async function throughBarrel() {}',
        'export function onlyInAComment() {}',
        'export const arrow = (x: number) => x;',
        'export const LIMIT = 3;',
        'export function ownUse() {}',
        'ownUse();',
      ].join('\n'),
      'payments/b.ts': "import { used } from './a';\nused();",
      'payments/index.ts': "export * from './a';",
      'worker/c.ts':
        "import { throughBarrel } from '../payments/index';\n// onlyInAComment, arrow\nvoid throughBarrel;",
      'db/m.ts': 'export function up() {}',
      'db/list.ts': "import * as m from './m';\nexport const all = { m };",
    };
    const modules = new Map(Object.entries(files).map(([file, source]) => [file, factsOf(file, source)]));
    expect(unusedFunctionExports(modules, Object.keys(files))).toEqual([
      'payments/a.ts arrow',
      'payments/a.ts onlyInAComment',
      'payments/a.ts ownUse',
    ]);
  });
});
