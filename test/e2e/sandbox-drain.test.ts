// The sandbox shows a refusal when its wallet is drained: `npm run sandbox:drain` (its script, run
// as a child process against the sandbox's DATA_DIR and database) moves the service wallet's USDC
// away on the local base chain and has the float read again; then `npm run sandbox:pay -- proxy`
// to the base target gets the 503 float_below_floor naming base, and a paid call on another
// network still goes through. Every answer of the service is checked against the document.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { createPublicClient, getAddress, parseAbi, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localTransport } from '../../devnet/evm/chain';
import { EVM_NETWORKS } from '../../devnet/networks';
import { startSandbox, type LocalSandbox, type SandboxState } from '../../devnet/sandbox';
import { sandboxPay } from '../../devnet/sandboxPay';
import { contractFetch } from '../support/relay';
import { sample } from '../support/metrics';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const ROOT = path.resolve(import.meta.dirname, '../..');
const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'sandbox-drain-'));
const balanceOfAbi = parseAbi(['function balanceOf(address owner) view returns (uint256)']);

let sandbox: LocalSandbox;
let t: TestService;
let state: SandboxState;

beforeAll(async () => {
  sandbox = await startSandbox({ dataDir, reset: false, log: pino({ level: 'silent' }), env: {}, print: () => {} });
  t = await startTestService(sandbox.env);
  state = await sandbox.ready(t.service.url, t.database.handle.db);
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(sandbox)?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

function targetOf(network: string): string {
  const [, details] = Object.entries(state.targetDetails).find(
    ([, entry]) => entry.network === network && entry.x402Version === 1,
  )!;
  return `${details.url}/paid`;
}

async function serviceUsdc(network: 'base'): Promise<bigint> {
  const client = createPublicClient({ transport: localTransport(state.rpc[network]!) });
  return client.readContract({
    address: EVM_NETWORKS[network].usdc,
    abi: balanceOfAbi,
    functionName: 'balanceOf',
    args: [getAddress(privateKeyToAccount(sandbox.env.EVM_PRIVATE_KEY as Hex).address)],
  });
}

describe('npm run sandbox:drain', () => {
  it('drains the service wallet on base, after which a paid proxy call there is refused with 503', async () => {
    const before = await sandboxPay(state, { mode: 'proxy', targetUrl: targetOf('base') }, contractFetch());
    expect(before.status).toBe(200);
    expect(await serviceUsdc('base')).toBeGreaterThan(0n);

    // Run asynchronously: the sandbox's chains answer from this very process.
    const drained = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'devnet/sandboxDrain.ts', 'base'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, DATA_DIR: dataDir, DATABASE_URL: t.database.url },
      timeout: 120_000,
    });
    expect(drained.stderr).toBe('');
    expect(drained.stdout).toMatch(/drained the service wallet 0x[0-9a-fA-F]{40} on base/);
    expect(drained.stdout).toContain('npm run sandbox:pay -- proxy');
    expect(await serviceUsdc('base')).toBe(0n);

    // The float job reads base again at once (the script queued it).
    const deadline = Date.now() + 60_000;
    for (;;) {
      const metrics = await t.client.get('/metrics');
      if (sample(metrics.text, 'prs_wallet_below_floor{network="base",kind="float"}') === 1) break;
      if (Date.now() > deadline) throw new Error('base never read below its floor');
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const refused = await sandboxPay(state, { mode: 'proxy', targetUrl: targetOf('base') }, contractFetch());
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.text)).toMatchObject({ code: 'float_below_floor', network: 'base' });
    // Another network is not refused.
    const elsewhere = await sandboxPay(state, { mode: 'proxy', targetUrl: targetOf('base-sepolia') }, contractFetch());
    expect(elsewhere.status).toBe(200);
  });
});
