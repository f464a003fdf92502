/**
 * One shape for the domain's outcomes (docs/architecture.md, "Outcomes"): a step that succeeds or
 * is refused answers a Result, a flow with more answers a union on `kind`. Two textual checks of
 * payments/: no exported type is a record told apart by a boolean (`settled: true`, `pending: true`,
 * `refunded: false`; Result's own `ok` aside), and nothing exported from payments/basics/http/ hands a
 * thrown OutboundError to its caller.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Boolean records that remain, each with why: none now. An entry needs a reason that a reviewer accepts. */
const NOT_YET_CONVERTED = new Map<string, string>();

/** Bodies the OpenAPI document defines with a boolean field: data sent as it is, not an outcome. */
const WIRE_BODIES = new Map([
  ['payments/operations/proxy/simulate.ts ProxySimulation', 'ProxySimResult.requiresPayment'],
]);

function sourceFiles(folder: string): string[] {
  return readdirSync(path.join(ROOT, folder)).flatMap((name) => {
    const relative = path.posix.join(folder, name);
    if (statSync(path.join(ROOT, relative)).isDirectory()) return sourceFiles(relative);
    return name.endsWith('.ts') ? [relative] : [];
  });
}

/** Each `export type Name = ...;` of a source, with its text: up to the `;` that closes it outside braces. */
function exportedTypes(source: string): { name: string; text: string }[] {
  const types: { name: string; text: string }[] = [];
  const lines = source.split('\n');
  for (let start = 0; start < lines.length; start += 1) {
    const name = /^export type (\w+)\b[^=]*=/.exec(lines[start]!)?.[1];
    if (name === undefined) continue;
    let depth = 0;
    let text = '';
    for (let index = start; index < lines.length; index += 1) {
      const line = lines[index]!.replace(/\/\/.*$/, '');
      text += `${line}\n`;
      depth += (line.match(/[{(]/g) ?? []).length - (line.match(/[})]/g) ?? []).length;
      if (depth <= 0 && line.trimEnd().endsWith(';')) break;
    }
    types.push({ name, text });
  }
  return types;
}

/** Each exported function of a source with its declared return type: after its parameters, up to its body. */
function exportedFunctions(source: string): { name: string; returns: string }[] {
  return [...source.matchAll(/^export (?:async )?function (\w+)\s*(?:<[^(]*>)?\(/gm)].map((match) => {
    let depth = 1;
    let index = match.index + match[0].length;
    for (; depth > 0 && index < source.length; index += 1) {
      if (source[index] === '(') depth += 1;
      if (source[index] === ')') depth -= 1;
    }
    const returns = /^\s*:\s*([^{]+)\{/.exec(source.slice(index))?.[1] ?? '';
    return { name: match[1]!, returns: returns.trim() };
  });
}

/** The members of a type that are a boolean literal (`settled: true`, `pending?: false`), Result's `ok` aside. */
function booleanDiscriminants(text: string): string[] {
  return [...text.matchAll(/\b(\w+)\??\s*:\s*(true|false)\b/g)]
    .map((match) => match[1]!)
    .filter((member) => member !== 'ok');
}

const PAYMENTS = sourceFiles('payments');

describe('outcomes in payments/', () => {
  it('reads the exported types (the check sees the outcomes it is about)', () => {
    const names = PAYMENTS.flatMap((file) =>
      exportedTypes(readFileSync(path.join(ROOT, file), 'utf8')).map((type) => type.name),
    );
    expect(names).toEqual(expect.arrayContaining(['SettlementOutcome', 'RefundOutcome', 'ProxyOutcome', 'UrlCheck']));
    const send = readFileSync(path.join(ROOT, 'payments/basics/http/send.ts'), 'utf8');
    expect(exportedFunctions(send)).toContainEqual({ name: 'sendTargetRequest', returns: 'Promise<TargetAnswer>' });
  });

  it('has no exported type told apart by a boolean', () => {
    const found: string[] = [];
    for (const file of PAYMENTS) {
      for (const type of exportedTypes(readFileSync(path.join(ROOT, file), 'utf8'))) {
        const members = booleanDiscriminants(type.text);
        if (members.length > 0) found.push(`${file} ${type.name}`);
      }
    }
    expect(found.filter((entry) => !NOT_YET_CONVERTED.has(entry) && !WIRE_BODIES.has(entry))).toEqual([]);
    // An entry fixed since is taken off the list.
    expect([...NOT_YET_CONVERTED.keys(), ...WIRE_BODIES.keys()].filter((entry) => !found.includes(entry))).toEqual([]);
  });

  it('lets no OutboundError out of payments/basics/http/', () => {
    const http = PAYMENTS.filter((file) => file.startsWith('payments/basics/http/'));
    const leaks: string[] = [];
    for (const file of http) {
      const source = readFileSync(path.join(ROOT, file), 'utf8');
      for (const { name, returns } of exportedFunctions(source)) {
        if (/\bOutbound(Error|Result)\b/.test(returns)) leaks.push(`${file} ${name} returns ${returns}`);
      }
      for (const type of exportedTypes(source)) {
        if (/\berror\??\s*:\s*OutboundError\b|\bOutboundResult\b/.test(type.text)) leaks.push(`${file} ${type.name}`);
      }
    }
    const index = readFileSync(path.join(ROOT, 'payments/basics/http/index.ts'), 'utf8');
    if (/export\s*\{[^}]*\bOutboundError\b(?!Code)/.test(index))
      leaks.push('payments/basics/http/index.ts exports OutboundError');
    expect(leaks).toEqual([]);
  });
});
