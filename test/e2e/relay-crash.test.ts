// A service killed with SIGKILL between the two legs of a relay: the client's payment has settled,
// the target is not paid yet. The service runs as a real child process (node --import tsx
// test/support/pausing-service.ts, one process, so the signal reaches it) against a test database
// and the local peers; its afterClientSettled hook stops it right after settlement, where the test
// kills it. A fresh service on the same database finishes the transaction with its jobs: the
// client is refunded on-chain and its record says refund_confirmed. No payment is lost.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../payments/config';
import { startService, type Service } from '../../server/service';
import { startPeers, type Peers } from '../../devnet/index';
import { contractClient } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv, pollWebhook } from '../support/proxy';
import { relayLegBalances } from '../support/relay';
import { killChild, relayUntilSettled, startChildService, waitFor } from '../support/child-service';
import { ifStarted } from '../support/teardown';

const PRICE = 20_000n;
const TOTAL = 20_600n;
/** The relay's watch job (enqueued when the payment is admitted) takes over this long after. */
const ABANDONED_AFTER_MS = 3_000;

let peers: Peers;
let database: TestDatabase;
let directory: string;
let child: ChildProcess | undefined;
let restarted: Service | undefined;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], pricesMicroUsdc: { paid: PRICE } });
  database = await createTestDatabase();
  directory = mkdtempSync(path.join(os.tmpdir(), 'relay-crash-'));
});

afterAll(async () => {
  child?.kill('SIGKILL');
  await restarted?.stop();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
  if (directory) rmSync(directory, { recursive: true, force: true });
});

function serviceEnv(): Record<string, string> {
  return {
    ...peersEnv(peers),
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    PORT: '0',
    RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS),
  };
}

describe('a service killed between settling the client and paying the target', () => {
  it('after a restart the job refunds the client on-chain; the record ends refund_confirmed', async () => {
    const network = 'base-sepolia';
    const target = peers.targets[network]!;
    const client = peers.wallets.client.evm.address;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, network, payTo);
    const marker = path.join(directory, 'settled');
    const running = await startChildService(serviceEnv(), marker);
    child = running.process;

    const relay = await relayUntilSettled(peers, network, running.url, target.routes.paid.url, marker);
    const { paying } = relay;
    const relayTxId = BigInt(relay.relayTxId);
    const { db } = database.handle;
    const settled = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .where('id', '=', relayTxId)
      .executeTakeFirstOrThrow();
    expect(settled).toMatchObject({ state: 'settled', target_payment_ref: null, amount_micro: TOTAL });
    expect(await peers.usdcBalance(network, client)).toBe(before.client - TOTAL);

    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    // The client's connection died with the process; the target was never paid.
    expect(await paying).toMatchObject({ error: expect.anything() });
    expect(target.requests.filter((request) => request.route === 'paid' && request.payment !== null)).toEqual([]);

    restarted = await startService(loadConfig({ ...serviceEnv(), LOG_LEVEL: 'silent' }), {
      logger: pino({ level: 'silent' }),
    });
    const webhookId = await waitFor('the refund decision', async () => {
      const row = await db
        .selectFrom('relay_transactions')
        .select('webhook_id')
        .where('id', '=', relayTxId)
        .executeTakeFirst();
      return row?.webhook_id ?? undefined;
    });
    const record = await pollWebhook({ client: contractClient(restarted.url) } as never, webhookId, 20_000);
    expect(record.status).toBe(200);
    expect(record.body).toMatchObject({
      status: 'refund_confirmed',
      network,
      method: 'direct',
      relayTxId: Number(relayTxId),
    });
    expect(record.body.message).toContain('the request ended before the target was paid');

    expect(await relayLegBalances(peers, network, payTo)).toEqual(before);
    const row = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .where('id', '=', relayTxId)
      .executeTakeFirstOrThrow();
    expect(row.state).toBe('refunded');
    const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', relayTxId).execute();
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({
      status: 'confirmed',
      amount_micro: TOTAL,
      recipient: client,
      tx_hash: record.body.txHash,
    });
  }, 90_000);
});
