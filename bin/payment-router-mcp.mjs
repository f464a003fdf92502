#!/usr/bin/env node
// `npx payment-router-mcp`: the router's MCP server over stdio (mcp/stdio.ts). Where esbuild is
// installed (a checkout with its development packages), it runs mcp/ bundled into .cache/mcp/,
// bundled again only when one of its sources changed; the packages stay in node_modules. Under
// tsx's loader every module, node_modules' too, passed through the loader's thread, which cost more
// CPU than the rest of the start. A production install (no development packages) runs the bundle of
// `npm run build`, dist/mcp.js.
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const source = path.join(root, 'mcp/stdio.ts');

/** The bundle's entry, when its sources are older than the bundling that read them. */
function freshBundle(cache) {
  try {
    const { startedAtMs, inputs } = JSON.parse(readFileSync(path.join(cache, 'inputs.json'), 'utf8'));
    const entry = path.join(cache, 'stdio.js');
    if (!existsSync(entry)) return undefined;
    return inputs.every((input) => statSync(path.join(root, input)).mtimeMs < startedAtMs) ? entry : undefined;
  } catch {
    return undefined;
  }
}

/**
 * mcp/stdio.ts and what it imports of ours, bundled: chunks (named by their content) first, then
 * the entry and the list of sources, so that a server starting meanwhile loads a whole bundle, old
 * or new.
 */
async function bundle() {
  const cache = path.join(root, '.cache/mcp');
  const fresh = freshBundle(cache);
  if (fresh) return fresh;
  const { build } = await import('esbuild');
  const startedAtMs = Date.now();
  const result = await build({
    absWorkingDir: root,
    entryPoints: { stdio: 'mcp/stdio.ts' },
    outdir: cache,
    bundle: true,
    // The wallet's module is a chunk of its own, loaded on the first payment with its packages.
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20.18',
    packages: 'external',
    // Paths our code resolves from its own location (the OpenAPI document) resolve from the source.
    define: { 'import.meta.url': JSON.stringify(pathToFileURL(source).href) },
    write: false,
    metafile: true,
    logLevel: 'warning',
  });
  mkdirSync(cache, { recursive: true });
  // Each file is written whole under another name and renamed: a server that started meanwhile never reads half of one.
  const place = (file, contents) => {
    writeFileSync(`${file}.${process.pid}`, contents);
    renameSync(`${file}.${process.pid}`, file);
  };
  const entry = path.join(cache, 'stdio.js');
  for (const file of result.outputFiles) if (file.path !== entry) place(file.path, file.contents);
  place(entry, result.outputFiles.find((file) => file.path === entry).contents);
  // This file too: a change of how the bundle is made makes it again.
  const inputs = [...Object.keys(result.metafile.inputs), path.relative(root, fileURLToPath(import.meta.url))];
  place(path.join(cache, 'inputs.json'), JSON.stringify({ startedAtMs, inputs }));
  return entry;
}

const built = path.join(root, 'dist/mcp.js');
let entry;
try {
  entry = await bundle();
} catch (error) {
  if (error.code !== 'ERR_MODULE_NOT_FOUND' || !existsSync(built))
    process.stderr.write(`payment-router-mcp: mcp/ could not be bundled: ${error.message}\n`);
}
if (entry) {
  await import(pathToFileURL(entry).href);
} else if (existsSync(built)) {
  await import(pathToFileURL(built).href);
} else {
  process.stderr.write('payment-router-mcp: run `npm run build` (dist/mcp.js), or install the development packages\n');
  process.exit(2);
}
