// A service killed with SIGKILL in the middle of a relay. The service runs as a real child process
// (server/main.ts under tsx, one process, so the signal reaches it) against a test database and the
// local peers, which stop it where the test wants: a proxy in front of the target holds our paid
// request (the client's payment has settled, the target is never paid), or a proxy in front of the
// chain holds the settlement's broadcast. A fresh service on the same database finishes the
// transaction with its jobs: the client is refunded on-chain and its record says refund_confirmed.
// No payment is lost.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { createPublicClient, type Hex } from 'viem';
import { localTransport } from '../../devnet/evm/chain';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../payments/basics/config';
import { startService, type Service } from '../../server/service';
import { startPeers, type Peers } from '../../devnet/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { contractClient } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv, pollWebhook } from '../support/proxy';
import { payingFetch, relayLegBalances, relayRequest } from '../support/relay';
import {
  killChild,
  relayUntilTargetIsPaid,
  startChildService,
  targetHoldingPaidRequests,
  waitFor,
} from '../support/child-service';
import { ifStarted } from '../support/teardown';

const PRICE = 20_000n;
const TOTAL = 20_600n;
/** The relay's watch job (enqueued when the payment is admitted) takes over this long after. */
const ABANDONED_AFTER_MS = 3_000;

let peers: Peers;
let database: TestDatabase;
let directory: string;
let child: ChildProcess | undefined;
const restarted: Service[] = [];
let rpcProxy: FaultProxy | undefined;
let hold: Awaited<ReturnType<typeof targetHoldingPaidRequests>> | undefined;

beforeAll(async () => {
  peers = await startPeers({ networks: ['base-sepolia'], pricesMicroUsdc: { paid: PRICE } });
  database = await createTestDatabase();
  directory = mkdtempSync(path.join(os.tmpdir(), 'relay-crash-'));
});

afterAll(async () => {
  child?.kill('SIGKILL');
  for (const service of restarted) await service.stop();
  await rpcProxy?.close();
  await hold?.close();
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

describe('a service killed in the middle of a relay', () => {
  it('between settling the client and paying the target: after a restart the job refunds the client on-chain; the record ends refund_confirmed', async () => {
    const network = 'base-sepolia';
    const target = peers.targets[network]!;
    const client = peers.wallets.client.evm.address;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, network, payTo);
    hold = await targetHoldingPaidRequests(target.url);
    const env = {
      ...serviceEnv(),
      SSRF_ALLOW_HOSTS: `${serviceEnv().SSRF_ALLOW_HOSTS},${new URL(hold.proxy.url).host}`,
      // Our authorization to the target, which never arrives there, expires soon.
      RELAY_PAYMENT_WINDOW_SECONDS: '10',
    };
    const running = await startChildService(env);
    child = running.process;

    const { paying } = await relayUntilTargetIsPaid(
      peers,
      network,
      running.url,
      `${hold.proxy.url}/paid`,
      hold.paidArrived,
    );
    const { db } = database.handle;
    const settled = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .orderBy('id', 'desc')
      .executeTakeFirstOrThrow();
    const relayTxId = settled.id;
    expect(settled).toMatchObject({ state: 'settled', amount_micro: TOTAL });
    expect(settled.target_payment_ref).not.toBeNull();
    expect(await peers.usdcBalance(network, client)).toBe(before.client - TOTAL);

    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    // The client's connection died with the process; the target was never paid.
    expect(await paying).toMatchObject({ error: expect.anything() });
    expect(target.requests.filter((request) => request.route === 'paid' && request.payment !== null)).toEqual([]);

    const service = await startService(loadConfig({ ...env, LOG_LEVEL: 'silent' }), {
      logger: pino({ level: 'silent' }),
    });
    restarted.push(service);
    const webhookId = await waitFor('the refund decision', async () => {
      const row = await db
        .selectFrom('relay_transactions')
        .select('webhook_id')
        .where('id', '=', relayTxId)
        .executeTakeFirst();
      return row?.webhook_id ?? undefined;
    });
    const record = await pollWebhook({ client: contractClient(service.url) } as never, webhookId, 20_000);
    expect(record.status).toBe(200);
    expect(record.body).toMatchObject({
      status: 'refund_confirmed',
      network,
      method: 'direct',
      relayTxId: Number(relayTxId),
    });
    expect(record.body.message).toContain('the target never charged');

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

  it('killed while its settlement is broadcast, the signed transaction stored: a restart sends it again and the record ends within 60 s, with RELAY_ABANDONED_AFTER_MS at its default', async () => {
    const network = 'base-sepolia';
    const target = peers.targets[network]!;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, network, payTo);
    // The node never hears of the settlement: its broadcast is held at our proxy until the process is gone.
    let held: () => void = () => undefined;
    const broadcastHeld = new Promise<void>((resolve) => (held = resolve));
    const isBroadcast = (body: Buffer) => body.toString('utf8').includes('eth_sendRawTransaction');
    rpcProxy = await startFaultProxy({
      upstream: peers.rpcUrls[network]!,
      delayMs: 600_000,
      choose: ({ body }) => (isBroadcast(body) ? 'delay' : 'pass'),
      beforeForward: ({ body }) => {
        if (isBroadcast(body)) held();
        return Promise.resolve();
      },
    });
    const env = { ...peersEnv(peers), DATABASE_URL: database.url, HOST: '127.0.0.1', PORT: '0' };
    const running = await startChildService({ ...env, RPC_URL_BASE_SEPOLIA: rpcProxy.url });
    child = running.process;
    const paying = payingFetch(peers, network)(
      `${running.url}/relay`,
      relayRequest({ api_url: target.routes.paid.url, method: 'GET' }),
    ).catch((error: unknown) => ({ error }));
    await broadcastHeld;
    const { db } = database.handle;
    const settling = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .orderBy('id', 'desc')
      .executeTakeFirstOrThrow();
    expect(settling).toMatchObject({ state: 'settling', settle_method: 'direct', amount_micro: TOTAL });
    expect(settling.client_raw_tx).not.toBeNull();
    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    expect(await paying).toMatchObject({ error: expect.anything() });
    const signed = settling.client_tx_hash as Hex;
    const publicClient = createPublicClient({ transport: localTransport(peers.rpcUrls[network]!) });
    await expect(publicClient.getTransactionReceipt({ hash: signed })).rejects.toThrow();

    const service = await startService(loadConfig({ ...env, LOG_LEVEL: 'silent' }), {
      logger: pino({ level: 'silent' }),
    });
    restarted.push(service);
    const final = await waitFor(
      'the record to end',
      async () => {
        const row = await db
          .selectFrom('relay_transactions')
          .select(['state', 'webhook_id'])
          .where('id', '=', settling.id)
          .executeTakeFirstOrThrow();
        return row.state === 'refunded' ? row : undefined;
      },
      180_000,
    );
    // The very transaction the killed process signed was sent again and settled the client's payment.
    expect((await publicClient.getTransactionReceipt({ hash: signed })).status).toBe('success');
    const record = await pollWebhook({ client: contractClient(service.url) } as never, final.webhook_id!, 20_000);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', network, method: 'direct' });
    expect(await relayLegBalances(peers, network, payTo)).toEqual(before);
  }, 300_000);
});
