/**
 * Chain-family code lives in payments/chains/ (one folder per family, found through
 * payments/chains/registry.ts): no production file outside it branches on the family. Reading a
 * family as data (/config grouping the enabled networks by it, a row's chainType stored with a
 * record) is fine; comparing it to a literal, switching on it, or asking "is this EVM" is not.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PRODUCTION_FOLDERS = ['server', 'handlers', 'payments', 'worker', 'db'];
const CHAIN_FOLDER = `payments${path.sep}chains${path.sep}`;

/** What a branch on the chain family looks like in our sources. */
const FAMILY_BRANCHES: { name: string; pattern: RegExp }[] = [
  { name: 'compares a chain type to a literal', pattern: /\b(chainType|chain_type)\s*[!=]==?\s*['"`]/ },
  {
    name: 'compares a literal to a chain type',
    pattern: /['"`](evm|solana|svm)['"`]\s*[!=]==?\s*[\w.?[\]'"]*\b(chainType|chain_type)\b/,
  },
  { name: 'switches on a chain type or family', pattern: /switch\s*\([^)]*\b(chainType|chain_type|family)\b[^)]*\)/ },
  { name: 'has a case of a family', pattern: /\bcase\s+['"`](evm|solana|svm)['"`]\s*:/ },
  {
    name: 'asks whether a network is of a family',
    pattern: /\bis(Evm|Solana|Svm)(Network|Payload|Chain)\b|\bisEvm\s*\(/,
  },
  { name: 'tells a family by a network name', pattern: /\.startsWith\(\s*['"`](solana|eip155|base|skale)/ },
  { name: 'tells a family by the shape of a payload', pattern: /['"`](authorization|transaction)['"`]\s+in\s+\w+/ },
];

function sourceFiles(folder: string): string[] {
  return readdirSync(path.join(ROOT, folder)).flatMap((name) => {
    const relative = path.join(folder, name);
    if (statSync(path.join(ROOT, relative)).isDirectory()) return sourceFiles(relative);
    return /\.(ts|mts|js|mjs)$/.test(name) ? [relative] : [];
  });
}

/** Each line of `source` that branches on the family, as "file:line: what". Comments are not code. */
export function familyBranches(file: string, source: string): string[] {
  const found: string[] = [];
  source.split('\n').forEach((line, index) => {
    const code = line.replace(/\/\/.*$/, '').replace(/^\s*\*.*$/, '');
    for (const { name, pattern } of FAMILY_BRANCHES)
      if (pattern.test(code)) found.push(`${file}:${index + 1}: ${name}: ${line.trim()}`);
  });
  return found;
}

describe('chain-family branches', () => {
  const files = PRODUCTION_FOLDERS.flatMap(sourceFiles);

  it('read every production file, the chain folders among them', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((file) => file.startsWith(CHAIN_FOLDER)).length).toBeGreaterThan(20);
  });

  it('appear in no production file outside payments/chains/', () => {
    const outside = files.filter((file) => !file.startsWith(CHAIN_FOLDER));
    expect(outside.flatMap((file) => familyBranches(file, readFileSync(path.join(ROOT, file), 'utf8')))).toEqual([]);
  });

  it('would catch each kind of branch, and not a family read as data', () => {
    const branches = [
      "if (NETWORK_TABLE[network].chainType === 'evm') {",
      "const solana = entry.chainType !== 'solana';",
      "return row.chain_type === 'evm' ? a() : b();",
      "if ('solana' === choice.chainType) return;",
      'switch (choice.chainType) {',
      "  case 'solana':",
      'const evmNetworks = networks.filter(isEvmNetwork);',
      "if (network.name.startsWith('solana')) throw error;",
      "return 'authorization' in payload ? a : b;",
    ];
    for (const line of branches) expect(familyBranches('x.ts', line), line).toHaveLength(1);
    const data = [
      'chainType: entry.chainType,',
      'const family = familyOf(network);',
      "// a comment: chainType === 'evm' reads as prose here",
      ' * when chainType === "solana" in a doc comment',
      'for (const name of enabled) (byFamily[NETWORK_TABLE[name].chainType] ??= []).push(name);',
    ];
    for (const line of data) expect(familyBranches('x.ts', line), line).toEqual([]);
  });
});
