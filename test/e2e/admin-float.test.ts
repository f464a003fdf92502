// `npm run admin -- float` (server/admin.ts, run as a child process with the service's
// configuration) against the local peers: every enabled network's float and gas read from the
// chains, their floors and variables, the relay refunds owed (pending, and failed ones for an
// operator) read from the database (EVM and Solana), and the money held in channels (0: no channel was opened);
// with --stored, the last reading without a chain read; once the wallet is drained on base, base
// is reported below its floor.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { drainLocalEvmWallet } from '../../devnet/drain';
import { recordClientPayment } from '../../payments/incoming/store';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { ifStarted } from '../support/teardown';
import { verifiedPayment } from '../support/verified-payment';

const ROOT = path.resolve(import.meta.dirname, '../..');

let peers: Peers;
let database: TestDatabase;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base', 'base-sepolia', 'solana-devnet'], v2Targets: false });
  database = await createTestDatabase();
});

afterAll(async () => {
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
});

/** The command's output, one block of lines per network. Run asynchronously: the peers' chains answer from this process. */
async function floatCommand(...args: string[]): Promise<{ header: string; blocks: Record<string, string> }> {
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', 'server/admin.ts', 'float', ...args],
    {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, ...peersEnv(peers), DATABASE_URL: database.url, LOG_LEVEL: 'silent' },
      timeout: 120_000,
    },
  );
  expect(stderr).toBe('');
  const [header = '', ...rest] = stdout.trimEnd().split('\n');
  const blocks: Record<string, string> = {};
  let current = '';
  for (const line of rest) {
    if (/^\S+:$/.test(line)) current = line.slice(0, -1);
    else blocks[current] = `${blocks[current] ?? ''}${line.trim().replace(/\s+/g, ' ')}\n`;
  }
  return { header, blocks };
}

describe('npm run admin -- float', () => {
  it("prints every network's float, gas, floors, refunds owed and channel funds, and a drained one below its floor", async () => {
    const { db } = database.handle;
    // Refunds owed on base-sepolia: one pending, one failed for good.
    for (const [state, amount] of [
      ['refund_pending', 10_300n],
      ['refund_failed', 5_000n],
    ] as const) {
      const recorded = await recordClientPayment(db, verifiedPayment(undefined, amount), { mode: 'relay' });
      if (!recorded.ok) throw new Error(recorded.details);
      await db.updateTable('relay_transactions').set({ state }).where('id', '=', recorded.value.id).execute();
    }
    const wallet = peers.wallets.service.evm.address;
    const usdc = (await peers.usdcBalance('base', wallet)) / 1_000_000n;

    const live = await floatCommand();
    expect(live.header).toBe('read from the chains now');
    expect(Object.keys(live.blocks)).toEqual(['base', 'base-sepolia', 'solana-devnet']);
    // Solana: the USDC token account and the SOL of the service's key (100 SOL from the harness).
    expect(live.blocks['solana-devnet']).toContain(`wallet ${peers.wallets.service.solana.address}\n`);
    expect(live.blocks['solana-devnet']).toContain('float 1000 USDC (floor 0, FLOAT_FLOOR_USDC_SOLANA_DEVNET)\n');
    expect(live.blocks['solana-devnet']).toContain('gas 100 SOL (floor 0, GAS_FLOOR_SOLANA_DEVNET)\n');
    expect(live.blocks.base).toContain(`wallet ${wallet}\n`);
    expect(live.blocks.base).toContain(`float ${usdc} USDC (floor 10, FLOAT_FLOOR_USDC_BASE)\n`);
    expect(live.blocks.base).toMatch(/gas [0-9.]+ native gas token \(floor 0\.001, GAS_FLOOR_BASE\)\n/);
    expect(live.blocks.base).toContain('status ok\n');
    expect(live.blocks.base).toContain('pending refunds 0 USDC (0); failed, for an operator: 0 USDC (0)\n');
    expect(live.blocks['base-sepolia']).toContain(
      'pending refunds 0.0103 USDC (1); failed, for an operator: 0.005 USDC (1)\n',
    );
    expect(live.blocks['base-sepolia']).toContain('(floor 0, FLOAT_FLOOR_USDC_BASE_SEPOLIA)');
    for (const block of Object.values(live.blocks)) expect(block).toContain('held in channels 0 USDC\n');

    await drainLocalEvmWallet('base', peers.rpcUrls.base!, peers.wallets.service.evm.privateKey);
    // --stored: the last reading, no chain read.
    const stored = await floatCommand('--stored');
    expect(stored.header).toBe("the float job's last readings (--stored: no chain was read)");
    expect(stored.blocks.base).toContain(`float ${usdc} USDC`);
    // Read now: below its floor.
    const drained = await floatCommand();
    expect(drained.blocks.base).toContain('float 0 USDC (floor 10, FLOAT_FLOOR_USDC_BASE)\n');
    expect(drained.blocks.base).toContain('status FLOAT BELOW FLOOR: /relay and /proxy refuse paid calls here\n');
    expect(drained.blocks['base-sepolia']).toContain('status ok\n');
  });
});
