// A start whose RPC URL serves another chain than its network's stops before anything starts, with
// one line naming the variable, the chain the URL serves and the network's, and no secret of the
// URL. The chain is a local Base Sepolia (chain id 84532) named as Arbitrum Sepolia's RPC (421614):
// the issue's own example. An RPC that serves the right chain, or none at all, does not stop it.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEvmChain, type LocalEvmChain } from '../../devnet/evm/chain';
import { partsOfSecretIn, SECRET } from '../support/url-variables';
import { ifStarted } from '../support/teardown';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** `npm start` in production as a process (not blocking this one, which serves the local chain). */
function start(env: Record<string, string>): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'server/main.ts'], {
      cwd: root,
      env: {
        ...process.env,
        NODE_ENV: 'production',
        EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
        // Never reached: the chains are asked first.
        DATABASE_URL: 'postgres://127.0.0.1:9/never',
        DATA_DIR: '.tmp/chain-identity-never-created',
        PORT: '0',
        HOST: '127.0.0.1',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

let baseSepolia: LocalEvmChain;
let urlWithSecrets: string;
beforeAll(async () => {
  baseSepolia = await startEvmChain('base-sepolia', []);
  const port = new URL(baseSepolia.rpcUrl).port;
  urlWithSecrets = `http://alice:${SECRET}@127.0.0.1:${port}/v2/${SECRET}?key=${SECRET}`;
}, 60_000);
afterAll(async () => {
  await ifStarted(baseSepolia)?.close();
});

describe('a start whose RPC URL serves another chain', () => {
  it.each([
    ['eip155:421614', 'RPC_URL_EIP155_421614'],
    // The usual name, in NETWORKS and in the variable's name.
    ['arbitrum-sepolia', 'RPC_URL_ARBITRUM_SEPOLIA'],
  ])(
    'NETWORKS=%s with %s at a chain whose id is 84532 exits with one line naming the variable and both ids, never the secret',
    async (network, variable) => {
      const run = await start({ NETWORKS: network, [variable]: urlWithSecrets });
      expect(run.status).toBe(1);
      expect(run.stderr.trim().split('\n')).toEqual([
        `payment-routing-service: configuration error: ${variable}: points at http://127.0.0.1, which answers chain id 84532, but eip155:421614 (Arbitrum Sepolia) is chain id 421614`,
      ]);
      expect(run.stderr + run.stdout).not.toContain(SECRET);
      expect(partsOfSecretIn(run.stderr + run.stdout)).toEqual([]);
    },
    70_000,
  );

  it('passes the check when the URL serves the network, and when it does not answer (readiness reports that)', async () => {
    for (const [network, variable, url] of [
      ['base-sepolia', 'RPC_URL_BASE_SEPOLIA', urlWithSecrets],
      ['arbitrum-sepolia', 'RPC_URL_ARBITRUM_SEPOLIA', 'http://127.0.0.1:9/'],
    ] as const) {
      const run = await start({ NETWORKS: network, [variable]: url });
      // Past the chains, the start stops at the database this test gives it, which never answers.
      expect(run.status).toBe(1);
      expect(run.stderr).not.toContain('configuration error');
      expect(run.stdout).toContain('the service could not start');
      expect(partsOfSecretIn(run.stderr + run.stdout)).toEqual([]);
    }
  }, 140_000);
});
