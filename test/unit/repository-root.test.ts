import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repositoryRoot } from '../../devnet/root';

const ROOT = path.resolve(import.meta.dirname, '../..');

describe('the repository root, from a module of the sandbox', () => {
  it.each([
    ['its source, two levels down', 'devnet/evm/chain.ts'],
    ['the built sandbox chunk, one level down', 'dist/sandbox-0000.js'],
  ])('is the same from %s', (_where, file) => {
    const root = repositoryRoot(pathToFileURL(path.join(ROOT, file)).href);
    expect(root).toBe(ROOT);
    expect(existsSync(path.join(root, 'hardhat.config.cjs'))).toBe(true);
  });

  it('is an error outside any package', () => {
    expect(() => repositoryRoot(pathToFileURL('/nowhere/at/all.js').href)).toThrow(/no package.json above/);
  });
});
