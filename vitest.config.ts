import { defineConfig } from 'vitest/config';

/**
 * The suite in projects named for what a test needs, each in test/<project>/:
 *  - unit: pure functions; no database, network, child process or local chain (test/setup/no-io.ts
 *    refuses sockets and child processes, and no database is provided).
 *  - db: domain functions against Postgres.
 *  - devnet: domain functions and the local peers (chains, Solana, facilitator, model, targets) on
 *    127.0.0.1, some with Postgres too; no HTTP service of ours.
 *  - e2e: our service over HTTP, through the contract client.
 *  - contract: the document's promises over HTTP: errors and their codes, caps, credentials, read
 *    endpoints, fuzzing, agreement of every answer with the document.
 *  - load: the load runner and the k6 scripts under the k6 stand-in.
 *  - image: the container image (Dockerfile) built with podman and run with buildah against the
 *    local peers; installs podman where it is missing; minutes on a first run, its base and
 *    layers cached afterwards.
 * Every project but unit shares one Postgres per run (test/setup/global.ts).
 */
const POSTGRES = ['test/setup/global.ts'];

function project(name: string, options: { globalSetup?: string[]; setupFiles?: string[] } = {}) {
  return {
    extends: true as const,
    test: { name, include: [`test/${name}/**/*.test.ts`], ...options },
  };
}

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    reporters: ['default'],
    projects: [
      project('unit', { setupFiles: ['test/setup/no-io.ts'] }),
      project('db', { globalSetup: POSTGRES }),
      project('devnet', { globalSetup: POSTGRES }),
      project('e2e', { globalSetup: POSTGRES }),
      project('contract', { globalSetup: POSTGRES }),
      project('load', { globalSetup: POSTGRES }),
      project('image', { globalSetup: POSTGRES }),
    ],
  },
});
