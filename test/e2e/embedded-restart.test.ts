// A service on the embedded Postgres (no DATABASE_URL) killed with SIGKILL in the middle of a relay:
// the client's payment has settled, our payment to the target is held on its way (at a proxy in
// front of the target), so the target is never paid. kill -9 does not reach the Postgres
// child, which keeps running. A supervisor's restart on the same DATA_DIR must start anyway
// (stopping the orphaned Postgres safely first), and its jobs must finish the relay: the client is
// refunded on-chain. A second instance on a DATA_DIR whose service is alive is still refused.
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONNECTION_FILE, isAlive } from '../../db/embedded';
import { startPeers, type Peers } from '../../devnet/index';
import {
  killChild,
  relayUntilTargetIsPaid,
  targetHoldingPaidRequests,
  startChildService,
  stopChild,
  waitFor,
} from '../support/child-service';
import { peersEnv } from '../support/proxy';
import { relayLegBalances } from '../support/relay';
import { ifStarted } from '../support/teardown';

const PRICE = 20_000n;
const TOTAL = 20_600n;
const ABANDONED_AFTER_MS = 3_000;

let peers: Peers;
let dataDir: string;
let hold: Awaited<ReturnType<typeof targetHoldingPaidRequests>>;
const children: ChildProcess[] = [];

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], pricesMicroUsdc: { paid: PRICE } });
  mkdirSync(path.resolve('.tmp'), { recursive: true });
  dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'embedded-restart-'));
  hold = await targetHoldingPaidRequests(peers.targets['base-sepolia']!.url);
});

afterAll(async () => {
  for (const child of children) await stopChild(child);
  // Whatever Postgres is still running for the directory (none when the test passed) is stopped.
  const pidFile = path.join(dataDir, 'postgres', 'postmaster.pid');
  if (existsSync(pidFile)) {
    const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      // already gone
    }
  }
  await ifStarted(hold)?.close();
  await ifStarted(peers)?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

function serviceEnv(): Record<string, string> {
  return {
    ...peersEnv(peers, [new URL(hold.proxy.url).host]),
    DATABASE_URL: '',
    // Our authorization to the target expires soon, and a dead process's lease lapses in seconds.
    RELAY_PAYMENT_WINDOW_SECONDS: '10',
    IDEMPOTENCY_LEASE_MS: '2000',
    DATA_DIR: dataDir,
    HOST: '127.0.0.1',
    PORT: '0',
    RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS),
  };
}

function postmasterPid(): number {
  return Number(readFileSync(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** A stopped postgres that its new parent has not reaped yet (a container's init may never) is gone. */
const alive = isAlive;

describe('a service on the embedded Postgres killed with SIGKILL mid-relay', () => {
  it('starts again on the same DATA_DIR and its jobs refund the client on-chain', async () => {
    const network = 'base-sepolia';
    const target = peers.targets[network]!;
    const client = peers.wallets.client.evm.address;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, network, payTo);

    const first = await startChildService(serviceEnv());
    children.push(first.process);
    const { paying } = await relayUntilTargetIsPaid(
      peers,
      network,
      first.url,
      `${hold.proxy.url}/paid`,
      hold.paidArrived,
    );
    expect(await peers.usdcBalance(network, client)).toBe(before.client - TOTAL);

    const orphan = postmasterPid();
    expect(await killChild(first.process)).toBe('SIGKILL');
    expect(await paying).toMatchObject({ error: expect.anything() });
    // The Postgres child outlived its service: this is what made every restart fail.
    expect(alive(orphan)).toBe(true);

    const second = await startChildService(serviceEnv());
    children.push(second.process);
    expect(second.logs.join('\n')).toContain('left running by a service that no longer runs');
    expect(alive(orphan)).toBe(false);
    expect(postmasterPid()).not.toBe(orphan);

    // The restarted service's jobs finish the relay: refunded on-chain, nothing paid to the target.
    const { url } = JSON.parse(readFileSync(path.join(dataDir, CONNECTION_FILE), 'utf8')) as { url: string };
    const database = new pg.Client({ connectionString: url });
    await database.connect();
    try {
      const state = await waitFor(
        'the refund',
        async () => {
          const result = await database.query<{ state: string }>(
            'select state from relay_transactions order by id desc limit 1',
          );
          const row = result.rows[0];
          return row?.state === 'refunded' ? row.state : undefined;
        },
        40_000,
      );
      expect(state).toBe('refunded');
    } finally {
      await database.end();
    }
    expect(await relayLegBalances(peers, network, payTo)).toEqual(before);

    // While that service runs, another one on the same DATA_DIR is refused with a clear message.
    await expect(startChildService(serviceEnv())).rejects.toThrow(
      /already running .*another instance using this DATA_DIR/,
    );
  }, 120_000);
});
