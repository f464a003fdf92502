// `npm run build`: the service as plain JavaScript in dist/, run with `npm run serve` (node
// dist/main.js, one process, no TypeScript loader). esbuild bundles our own code; packages stay
// in node_modules (imported at run time). The sandbox (devnet/, development packages) is split
// into chunks loaded only when the sandbox starts, so a production install never loads them.
// dist/ sits one level below the root, as server/ does: paths our code resolves from its own
// location (the OpenAPI document in openapi/dist/) resolve the same from the bundle; the database
// functions' SQL files are copied next to it.
//
// `node tools/build.mjs --if-stale` (what `npm start` runs first) builds only when dist/ is not a
// build of the current files: dist/build-inputs.json names every file the last build read, with
// its size and modification time, and a check costs a few tens of milliseconds. A build is
// written beside dist/ and then renamed into its place, so a process starting from dist/ (another
// `npm start`, `npm run serve`) never finds it half written.
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const outdir = path.join(root, 'dist');
const INPUTS_FILE = 'build-inputs.json';
/** Files a build depends on besides those esbuild reads: this script, esbuild itself and the copied SQL. */
const sqlFiles = () => readdirSync(path.join(root, 'db/functions')).filter((file) => file.endsWith('.sql'));
const extraInputs = () => [
  'tools/build.mjs',
  'node_modules/esbuild/package.json',
  ...sqlFiles().map((file) => `db/functions/${file}`),
];

/** Whether dist/ was built from the files as they are now (same size and modification time each). */
function upToDate() {
  let recorded;
  try {
    recorded = JSON.parse(readFileSync(path.join(outdir, INPUTS_FILE), 'utf8')).inputs;
  } catch {
    return false;
  }
  return Object.entries(recorded).every(([file, [size, mtimeMs]]) => {
    try {
      const stats = statSync(path.join(root, file));
      return stats.size === size && stats.mtimeMs === mtimeMs;
    } catch {
      return false;
    }
  });
}

if (process.argv.includes('--if-stale') && upToDate()) process.exit(0);

// `--at-install` (npm's prepare, after `npm install` or `npm ci`): dist/ is built with the
// install, so that the first `npm start` finds it ready. Never a failed install: without esbuild
// (a production install) or with the build failing, it says so and leaves dist/ to `npm start`
// (which builds it, or shows why it cannot) or `npm run build`.
const atInstall = process.argv.includes('--at-install');

// Loaded only to build: the check above needs none of it.
let build;
try {
  ({ build } = await import('esbuild'));
} catch (error) {
  if (!atInstall) throw error;
  console.log('dist/ is not built at install without the development packages (npm run build builds it)');
  process.exit(0);
}

// Packages stay in node_modules, except a few pure-JavaScript ESM ones that the service imports at
// start and uses little of: bundled, only the parts it uses are loaded (viem's root module alone
// loads hundreds of files, about 0.6 s of CPU at every start).
const BUNDLED =
  /^(viem|ox|abitype|kysely|@x402\/core|@noble\/[^/]+|@scure\/[^/]+|@solana\/[^/]+|@solana-program\/[^/]+)(\/|$)/;
// The sandbox's code (devnet/) has the x402 packages it drives bundled with it too, and what they
// import of the packages above: one copy of each (the x402 packages and the sandbox share viem's
// and @solana/kit's objects), and x402 1.2.0 no longer loads every chain viem knows (viem/chains,
// about a second of CPU at each start of the sandbox).
const SANDBOX_BUNDLED = /^(x402|x402-express|x402-fetch|@x402\/[^/]+)(\/|$)/;
const DEV_ONLY = `${path.sep}devnet${path.sep}`;
const packagesOutside = {
  name: 'packages-outside',
  setup(builder) {
    builder.onResolve({ filter: /^[^./]/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      const fromPackage = args.importer.includes(`${path.sep}node_modules${path.sep}`);
      const fromSandbox = args.importer.includes(DEV_ONLY) && !fromPackage;
      if (BUNDLED.test(args.path)) return undefined;
      if (SANDBOX_BUNDLED.test(args.path) && (fromSandbox || fromPackage)) return undefined;
      return { path: args.path, external: true };
    });
  },
};

try {
  await buildDist();
} catch (error) {
  if (!atInstall) throw error;
  console.error(`dist/ was not built at install (npm start builds it, or shows why it cannot): ${error.message}`);
}

async function buildDist() {
  const started = performance.now();
  const startedAt = Date.now();
  const result = await build({
    absWorkingDir: root,
    entryPoints: {
      main: 'server/main.ts',
      admin: 'server/admin.ts',
      mcp: 'mcp/stdio.ts',
      'source-maps': 'server/sourceMaps.ts',
      // The worker thread that runs the sandbox's peers (devnet/sandbox.ts starts it by this name).
      'sandbox-peers': 'devnet/sandboxPeers.ts',
    },
    outdir,
    write: false,
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

  // Written in a directory of its own first (on the same file system, under the ignored .tmp/),
  // then renamed into dist/'s place.
  mkdirSync(path.join(root, '.tmp'), { recursive: true });
  const staging = mkdtempSync(path.join(root, '.tmp', 'build-'));
  try {
    for (const file of result.outputFiles) {
      const target = path.join(staging, path.relative(outdir, file.path));
      mkdirSync(path.dirname(target), { recursive: true });
      writeFileSync(target, file.contents);
    }
    for (const file of sqlFiles()) copyFileSync(path.join(root, 'db/functions', file), path.join(staging, file));
    const inputs = {};
    for (const file of [...Object.keys(result.metafile.inputs), ...extraInputs()]) {
      const stats = statSync(path.join(root, file));
      // A file changed while the build ran may not be in it: recorded so that it never matches.
      inputs[file] = [stats.size, stats.mtimeMs >= startedAt ? -1 : stats.mtimeMs];
    }
    writeFileSync(path.join(staging, INPUTS_FILE), JSON.stringify({ inputs }) + '\n');
    replaceOutdir(staging);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  const outputs = result.outputFiles.filter((file) => file.path.endsWith('.js'));
  console.log(`built ${outputs.length} files in dist/ in ${Math.round(performance.now() - started)} ms`);
}

/** Puts `staging` in dist/'s place; a build finishing at the same moment may put its own there first. */
function replaceOutdir(staging) {
  const previous = [];
  for (let attempt = 0; ; attempt++) {
    const aside = `${staging}-previous-${attempt}`;
    try {
      renameSync(outdir, aside);
      previous.push(aside);
    } catch (error) {
      if (error.code !== 'ENOENT') throw error;
    }
    try {
      renameSync(staging, outdir);
      break;
    } catch (error) {
      if ((error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') || attempt >= 5) throw error;
    }
  }
  for (const aside of previous) rmSync(aside, { recursive: true, force: true });
}
