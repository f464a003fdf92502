// `npm run build`: the service as plain JavaScript in dist/, run with `npm run serve` (node
// dist/main.js, one process, no TypeScript loader). esbuild bundles our own code; packages stay
// in node_modules (imported at run time). The sandbox (devnet/, development packages) is split
// into chunks loaded only when the sandbox starts, so a production install never loads them.
// dist/ sits one level below the root, as server/ does: paths our code resolves from its own
// location (the OpenAPI document in openapi/dist/) resolve the same from the bundle; the database
// functions' SQL files are copied next to it.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const outdir = path.join(root, 'dist');
rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });

// Packages stay in node_modules, except a few pure-JavaScript ESM ones that the service imports at
// start and uses little of: bundled, only the parts it uses are loaded (viem's root module alone
// loads hundreds of files, about 0.6 s of CPU at every start). The sandbox's code (devnet/) keeps
// importing them from node_modules, as the x402 packages it drives do.
const BUNDLED =
  /^(viem|ox|abitype|kysely|@x402\/core|@noble\/[^/]+|@scure\/[^/]+|@solana\/[^/]+|@solana-program\/[^/]+)(\/|$)/;
const DEV_ONLY = `${path.sep}devnet${path.sep}`;
const packagesOutside = {
  name: 'packages-outside',
  setup(builder) {
    builder.onResolve({ filter: /^[^./]/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      const fromSandbox =
        args.importer.includes(DEV_ONLY) && !args.importer.includes(`${path.sep}node_modules${path.sep}`);
      if (BUNDLED.test(args.path) && !fromSandbox) return undefined;
      return { path: args.path, external: true };
    });
  },
};

const started = performance.now();
const result = await build({
  absWorkingDir: root,
  entryPoints: {
    main: 'server/main.ts',
    admin: 'server/admin.ts',
    mcp: 'mcp/stdio.ts',
    'source-maps': 'server/sourceMaps.ts',
  },
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20.18',
  plugins: [packagesOutside],
  sourcemap: 'linked',
  chunkNames: '[name]-[hash]',
  metafile: true,
  logLevel: 'warning',
});
for (const file of readdirSync(path.join(root, 'db/functions'))) {
  if (file.endsWith('.sql')) copyFileSync(path.join(root, 'db/functions', file), path.join(outdir, file));
}
const outputs = Object.keys(result.metafile.outputs).filter((file) => file.endsWith('.js'));
console.log(`built ${outputs.length} files in dist/ in ${Math.round(performance.now() - started)} ms`);
