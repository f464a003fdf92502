// The repository's root folder, found from a module's own location by walking up to the
// package.json: the same from the sources (devnet/evm/chain.ts, two levels down) and from the
// built sandbox chunk (dist/, one level down), so files at the root (hardhat.config.cjs, .cache/)
// are found either way.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export function repositoryRoot(moduleUrl: string): string {
  let folder = path.dirname(fileURLToPath(moduleUrl));
  while (!existsSync(path.join(folder, 'package.json'))) {
    const parent = path.dirname(folder);
    if (parent === folder) throw new Error(`no package.json above ${fileURLToPath(moduleUrl)}`);
    folder = parent;
  }
  return folder;
}
