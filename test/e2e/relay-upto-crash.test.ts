// A service killed with SIGKILL in the middle of a /relay paid by an upto permit, after our
// payment to the target left. The service runs as a real child process (server/main.ts under
// tsx); the client is unmodified @x402/fetch 2.27 with @x402/evm's upto scheme paying on Base
// Sepolia; the target is unmodified @x402/express asking upto on Polygon Amoy and settling 7,500
// of its 20,000 micro-USDC maximum. A fresh service on the same database finishes the transaction
// with its watch job: the payer pays exactly what the target used plus the fee, once, no refund.
//   - killed while the target holds our paid call (the target then settles, with nobody to answer):
//     the permit was never settled; the job reads the target's settlement on the chain and settles
//     the permit for it.
//   - killed while its settlement of the permit is broadcast (held at a proxy in front of the node,
//     its signed bytes stored): the job sends that very transaction again.
import type { ChildProcess } from 'node:child_process';
import { wrapFetchWithPayment } from '@x402/fetch';
import { pino } from 'pino';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { atomicAmount, type EvmNetworkName, type Peers } from '../../devnet/index';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { loadConfig } from '../../payments/basics/config';
import { startService, type Service } from '../../server/service';
import { killChild, startChildService, waitFor } from '../support/child-service';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { relayRequest } from '../support/relay';
import { ifStarted } from '../support/teardown';
import { newUptoPayer, RELAY_UPTO_USED_TOTAL, startUptoPeers, UPTO_USED } from '../support/upto';

const TARGET = 'upto-less-polygon-amoy';
const NETWORK: EvmNetworkName = 'polygon-amoy';
const CLIENT_NETWORK: EvmNetworkName = 'base-sepolia';
/** The relay's watch job (enqueued when the payment is admitted) takes over this long after. */
const ABANDONED_AFTER_MS = 3_000;

let peers: Peers;
let database: TestDatabase;
let child: ChildProcess | undefined;
const restarted: Service[] = [];
const proxies: FaultProxy[] = [];
const releases: (() => void)[] = [];

beforeAll(async () => {
  peers = await startUptoPeers(CLIENT_NETWORK, NETWORK, TARGET);
  database = await createTestDatabase();
});

afterAll(async () => {
  child?.kill('SIGKILL');
  for (const release of releases) release();
  for (const service of restarted) await service.stop();
  for (const proxy of proxies) await proxy.close();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
});

function serviceEnv(allowedHosts: string[] = []): Record<string, string> {
  return {
    ...peersEnv(peers, allowedHosts),
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    PORT: '0',
    RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS),
  };
}

/** The payer's /relay to the target through the service at `serviceUrl`, by upto; its status or the error it ended with. */
function payByUpto(serviceUrl: string, key: Hex, apiUrl: string) {
  return wrapFetchWithPayment(fetch, x402ClientV2(privateKeyToAccount(key), { upto: true }))(
    `${serviceUrl}/relay`,
    relayRequest({ api_url: apiUrl, method: 'GET', network: CLIENT_NETWORK }),
  ).then(
    (response) => ({ status: response.status }),
    (error: unknown) => ({ error }),
  );
}

async function legs(payer: string) {
  return {
    payer: await peers.usdcBalance(CLIENT_NETWORK, payer),
    ours: await peers.usdcBalance(CLIENT_NETWORK, peers.wallets.service.evm.address),
    target: await peers.usdcBalance(NETWORK, peers.targets[TARGET]!.routes.paid.payTo),
  };
}

async function restart(env: Record<string, string>): Promise<Service> {
  const service = await startService(loadConfig({ ...env, LOG_LEVEL: 'silent' }), {
    logger: pino({ level: 'silent' }),
  });
  restarted.push(service);
  return service;
}

/** The row once it ended, with its refunds, the settlement of the permit read from the chain. */
async function ended(id: bigint) {
  const { db } = database.handle;
  const row = await waitFor(
    'the relay transaction to end',
    async () => {
      const found = await db
        .selectFrom('relay_transactions')
        .selectAll()
        .where('id', '=', id)
        .executeTakeFirstOrThrow();
      return found.state === 'settling' || found.state === 'received' || found.state === 'settled' ? undefined : found;
    },
    60_000,
  );
  const refunds = await db.selectFrom('refunds').selectAll().where('relay_transaction_id', '=', id).execute();
  return { row, refunds };
}

describe('a service killed during a /relay paid by upto, after the target was paid', () => {
  it('before settling the permit (the target settles after the process died): a restarted service settles it for what the target used plus the fee, once', async () => {
    const payer = await newUptoPayer(peers, CLIENT_NETWORK);
    const before = await legs(payer.address);
    let arrived: () => void = () => undefined;
    const paidArrived = new Promise<void>((resolve) => (arrived = resolve));
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    releases.push(release);
    // The target's paid call is held here, then passed on after the process is gone.
    const hold = await startFaultProxy({
      upstream: peers.targets[TARGET]!.url,
      beforeForward: async ({ headers }) => {
        if (headers['payment-signature'] === undefined) return;
        arrived();
        await released;
      },
    });
    proxies.push(hold);
    const env = serviceEnv([new URL(hold.url).host]);
    const running = await startChildService(env);
    child = running.process;

    const paying = payByUpto(running.url, payer.key, `${hold.url}/paid`);
    await Promise.race([paidArrived, paying.then((end) => Promise.reject(new Error(JSON.stringify(end))))]);
    const { db } = database.handle;
    const row = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .where('payer', '=', payer.address)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ state: 'received', scheme: 'upto', client_tx_hash: null });
    expect(row.target_payment_ref).not.toBeNull();

    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    expect(await paying).toMatchObject({ error: expect.anything() });
    // Our payment reaches the target now; it settles what it used, with nobody to answer.
    release();
    const used = atomicAmount(NETWORK, UPTO_USED);
    await waitFor('the target to settle', async () =>
      (await legs(payer.address)).target === before.target + used ? true : undefined,
    );
    expect((await legs(payer.address)).payer).toBe(before.payer);

    const service = await restart(env);
    const { row: final, refunds } = await ended(row.id);
    expect(final).toMatchObject({
      state: 'delivered',
      settled_atomic: atomicAmount(CLIENT_NETWORK, RELAY_UPTO_USED_TOTAL).toString(),
      charged_micro: RELAY_UPTO_USED_TOTAL,
      target_used_micro: UPTO_USED,
      refund_micro: null,
    });
    expect(refunds).toEqual([]);
    expect(await legs(payer.address)).toEqual({
      payer: before.payer - RELAY_UPTO_USED_TOTAL,
      ours: before.ours + RELAY_UPTO_USED_TOTAL,
      target: before.target + used,
    });
    const receipt = await peers.evmChains[CLIENT_NETWORK]!.publicClient.getTransactionReceipt({
      hash: final.client_tx_hash as Hex,
    });
    expect(receipt.status).toBe('success');
    await service.stop();
    restarted.splice(restarted.indexOf(service), 1);
  }, 120_000);

  it('while its settlement of the permit is broadcast (the signed transaction stored): a restarted service sends it again; the payer pays what the target used plus the fee, once', async () => {
    const payer = await newUptoPayer(peers, CLIENT_NETWORK);
    const before = await legs(payer.address);
    // The node never hears of our settlement: its broadcast is held at this proxy until the process is gone.
    let broadcast: () => void = () => undefined;
    const broadcastHeld = new Promise<void>((resolve) => (broadcast = resolve));
    const isBroadcast = (body: Buffer) => body.toString('utf8').includes('eth_sendRawTransaction');
    const rpc = await startFaultProxy({
      upstream: peers.rpcUrls[CLIENT_NETWORK]!,
      delayMs: 600_000,
      choose: ({ body }) => (isBroadcast(body) ? 'delay' : 'pass'),
      beforeForward: ({ body }) => {
        if (isBroadcast(body)) broadcast();
        return Promise.resolve();
      },
    });
    proxies.push(rpc);
    const env = serviceEnv();
    const running = await startChildService({ ...env, RPC_URL_BASE_SEPOLIA: rpc.url });
    child = running.process;

    const paying = payByUpto(running.url, payer.key, peers.targets[TARGET]!.routes.paid.url);
    await Promise.race([broadcastHeld, paying.then((end) => Promise.reject(new Error(JSON.stringify(end))))]);
    const { db } = database.handle;
    const settling = await db
      .selectFrom('relay_transactions')
      .selectAll()
      .where('payer', '=', payer.address)
      .executeTakeFirstOrThrow();
    expect(settling).toMatchObject({
      state: 'settling',
      scheme: 'upto',
      settled_atomic: atomicAmount(CLIENT_NETWORK, RELAY_UPTO_USED_TOTAL).toString(),
    });
    expect(settling.client_raw_tx).not.toBeNull();
    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    expect(await paying).toMatchObject({ error: expect.anything() });
    const signed = settling.client_tx_hash as Hex;
    const client = peers.evmChains[CLIENT_NETWORK]!.publicClient;
    await expect(client.getTransactionReceipt({ hash: signed })).rejects.toThrow();

    await restart(env);
    const { row: final, refunds } = await ended(settling.id);
    expect(final).toMatchObject({ state: 'delivered', client_tx_hash: signed, charged_micro: RELAY_UPTO_USED_TOTAL });
    expect(refunds).toEqual([]);
    // The very transaction the killed process signed settled the permit.
    expect((await client.getTransactionReceipt({ hash: signed })).status).toBe('success');
    expect(await legs(payer.address)).toEqual({
      payer: before.payer - RELAY_UPTO_USED_TOTAL,
      ours: before.ours + RELAY_UPTO_USED_TOTAL,
      target: before.target + atomicAmount(NETWORK, UPTO_USED),
    });
  }, 120_000);
});
