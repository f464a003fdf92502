/**
 * The unit project's setup: a unit test checks pure functions, so any socket it opens, server it
 * starts or process it spawns is a mistake, reported at the call. (No database is provided to
 * this project either: test/support/database.ts refuses to run without one.) Reading the
 * repository's own files is allowed: the layering checks read the source tree.
 */
import { createRequire, syncBuiltinESMExports } from 'node:module';
import net from 'node:net';

const require = createRequire(import.meta.url);

function refuse(what: string): never {
  throw new Error(
    `${what} in a unit test: a test that needs the network, a database or a process belongs to another project (see vitest.config.ts)`,
  );
}

net.Socket.prototype.connect = function connect() {
  refuse('a network connection');
};
net.Server.prototype.listen = function listen() {
  refuse('a listening server');
};

const childProcess = require('node:child_process') as Record<string, unknown>;
for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  childProcess[name] = () => refuse(`child_process.${name}`);
}
syncBuiltinESMExports();
