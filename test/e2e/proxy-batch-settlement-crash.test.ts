// A service killed with SIGKILL between signing a channel voucher and recording the seller's
// answer. The service runs as a real child process (server/main.ts under tsx) paying /proxy calls
// to the unmodified @x402/express batch-settlement target on Polygon Amoy through its own channel.
// The paid call is held at a proxy in front of the target until the process is gone, then passed
// on: the seller commits the voucher with nobody to answer. A fresh service on the same database
// recovers the channel from its records and the chain: its next voucher is corrected by the
// seller (proven by our own signature), the killed call's voucher is then known to be committed,
// and the sweep and the watch job charge the killed call's credits once. Every leg is read from
// the chain after the seller claims and settles: nothing is charged twice, nothing is lost.
import type { ChildProcess } from 'node:child_process';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { batchTargetName, startPeers, type Peers, type Target } from '../../devnet/index';
import { channelOnChain } from '../support/channels';
import { organisationBalance } from '../../payments/accounts/credits';
import { proxyCredits } from '../../payments/accounts/fees';
import { loadConfig } from '../../payments/basics/config';
import { startService, type Service } from '../../server/service';
import { createTestAccount } from '../support/accounts';
import { killChild, startChildService, waitFor } from '../support/child-service';
import { contractClient } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { ifStarted } from '../support/teardown';

const NETWORK = 'polygon-amoy' as const;
const PRICE = 10_000n;
const DEPOSIT = 25n * PRICE;
const PER_CALL_CREDITS = proxyCredits(PRICE, 3).totalCredits;

let peers: Peers;
let target: Target;
let database: TestDatabase;
let child: ChildProcess | undefined;
let restarted: Service | undefined;
let hold: FaultProxy | undefined;
let release: () => void = () => undefined;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  target = peers.targets[batchTargetName(NETWORK)]!;
  database = await createTestDatabase();
});

afterAll(async () => {
  child?.kill('SIGKILL');
  release();
  await restarted?.stop();
  await hold?.close();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
});

describe('a service killed between signing a voucher and recording its answer', () => {
  it('is recovered from its records and the chain: the killed call is charged once, the next one once', async () => {
    let arrived: () => void = () => undefined;
    const paidArrived = new Promise<void>((resolve) => (arrived = resolve));
    const released = new Promise<void>((resolve) => (release = resolve));
    // The paid call is held here until the process is gone, then passed on to the seller.
    hold = await startFaultProxy({
      upstream: target.url,
      beforeForward: async ({ headers }) => {
        if (headers['payment-signature'] === undefined) return;
        arrived();
        await released;
      },
    });
    const env = {
      ...peersEnv(peers, [new URL(hold.url).host]),
      DATABASE_URL: database.url,
      HOST: '127.0.0.1',
      PORT: '0',
      PAYER_CHANNEL_DEPOSIT_MULTIPLIER: '25',
      // The sweep hands a channel payment with no recorded answer to the watch job after this.
      PROXY_PAYMENT_WINDOW_SECONDS: '10',
    };
    const running = await startChildService(env);
    child = running.process;
    const { db } = database.handle;
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const ours = peers.wallets.service.evm.address;
    const before = {
      ours: await peers.usdcBalance(NETWORK, ours),
      payTo: await peers.usdcBalance(NETWORK, target.payTo),
    };

    // First call: the channel is opened with its deposit, and charged once.
    const client = contractClient(running.url);
    const first = await client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(first.status, first.text).toBe(200);

    // Second call, held at the proxy: its voucher is recorded and sent; the process dies.
    const killed = client
      .post(
        '/proxy',
        { api_url: `${hold.url}${new URL(target.routes.paid.url).pathname}`, method: 'GET' },
        { headers: { 'x-api-key': key } },
      )
      .catch((error: unknown) => ({ error }));
    await paidArrived;
    expect(await killChild(child)).toBe('SIGKILL');
    expect(await killed).toHaveProperty('error');
    const [sentVoucher] = await db.selectFrom('payer_vouchers').selectAll().orderBy('id', 'desc').limit(1).execute();
    expect(sentVoucher).toMatchObject({ state: 'sent', ceiling_atomic: String(2n * PRICE) });
    const channelId = sentVoucher!.channel_id;
    // The seller gets the voucher after all, and commits it with nobody left to answer.
    release();
    const seller = target.batchSettlement[0]!;
    await waitFor('the seller to commit the killed call', async () => {
      const stored = await seller.storage.get(channelId);
      return stored && BigInt(stored.chargedCumulativeAmount) === 2n * PRICE ? stored : undefined;
    });

    // A fresh service on the same database.
    restarted = await startService(loadConfig({ ...env, LOG_LEVEL: 'silent' }), { logger: pino({ level: 'silent' }) });
    const next = await contractClient(restarted.url).post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(next.status, next.text).toBe(200);
    const vouchers = await db.selectFrom('payer_vouchers').selectAll().orderBy('id').execute();
    expect(vouchers.map((voucher) => [voucher.state, voucher.base_atomic, voucher.ceiling_atomic])).toEqual([
      ['charged', '0', String(PRICE)],
      // The killed call's voucher: proven committed by the seller's correction.
      ['charged', String(PRICE), String(2n * PRICE)],
      // Signed on our stale base, corrected by the seller.
      ['not_charged', String(PRICE), String(2n * PRICE)],
      ['charged', String(2n * PRICE), String(3n * PRICE)],
    ]);

    // The killed call's credits: held until the sweep hands its row to the watch job, then charged once.
    const rows = await waitFor(
      'every proxy payment to be charged',
      async () => {
        const found = await db
          .selectFrom('proxy_payments')
          .select(['state', 'credits'])
          .where('organisation_id', '=', organisationId)
          .execute();
        return found.every((row) => row.state === 'charged') ? found : undefined;
      },
      180_000,
    );
    expect(rows).toHaveLength(3);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - 3n * PER_CALL_CREDITS);

    // On chain: one deposit of ours; the seller claims exactly the three calls.
    await seller.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, channelId)).toEqual({ balance: DEPOSIT, totalClaimed: 3n * PRICE });
    expect(await peers.usdcBalance(NETWORK, target.payTo)).toBe(before.payTo + 3n * PRICE);
    expect(await peers.usdcBalance(NETWORK, ours)).toBe(before.ours - DEPOSIT);
  }, 400_000);
});
