// /proxy paying a batch-settlement target through our own channel: the target is the unmodified
// @x402/express 2.27 with @x402/evm's batch-settlement server scheme on Polygon Amoy (asking
// batch-settlement alone), settled by the unmodified @x402/evm facilitator; our wallet opens one
// channel, deposits once, then pays each call by a voucher. Every leg is read from the chain after
// the seller's channel manager claims and settles. Also: a failed target is not charged, a seller's
// corrective 402 is adopted only when our own signature proves it, and a voucher whose answer was
// lost is decided by the channel's next exchange without a double charge.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { batchTargetName, startPeers, type Peers, type Target } from '../../devnet/index';
import { channelOnChain } from '../support/channels';
import { organisationBalance } from '../../payments/accounts/credits';
import { loadConfig } from '../../payments/basics/config';
import { startService } from '../../server/service';
import { contractClient } from '../support/contract';
import { proxyCredits } from '../../payments/accounts/fees';
import { createTestAccount } from '../support/accounts';
import { ledgerSums, peersEnv, pollWebhook } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'polygon-amoy' as const;
const PRICE = 10_000n;
const CALLS = 20;
/** Our deposit policy: 25 times the price, so one deposit covers every call of this file. */
const MULTIPLIER = 25n;
const DEPOSIT = MULTIPLIER * PRICE;
const PER_CALL_CREDITS = proxyCredits(PRICE, 3).totalCredits;

let peers: Peers;
let t: TestService;
let db: Db;
let target: Target;
/** In front of the target: cuts the answer to one paid call after the seller committed it. */
let breaking: FaultProxy | undefined;
let cutNext = false;
/** In front of the seller under one URL of its own: the seller's route it forwards to (and so the price). */
let front: { url: string; close(): Promise<void> } | undefined;
let frontPath = '/paid';

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE, paidEcho: 2n * PRICE } });
  try {
    target = peers.targets[batchTargetName(NETWORK)]!;
    breaking = await startFaultProxy({
      upstream: target.url,
      choose: (request) => {
        if (!request.headers['payment-signature'] || !cutNext) return 'pass';
        cutNext = false;
        return 'reset_mid_body';
      },
    });
    const forwarder = await startForwarder(target.url, () => frontPath);
    front = forwarder;
    t = await startTestService(
      {
        ...peersEnv(peers, [new URL(breaking.url).host, new URL(forwarder.url).host]),
        PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(MULTIPLIER),
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
  } catch (error) {
    await front?.close();
    await breaking?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await front?.close();
  await breaking?.close();
  await ifStarted(peers)?.stop();
});

const ours = () => peers.wallets.service.evm.address;

async function proxy(key: string, url: string) {
  return t.client.post('/proxy', { api_url: url, method: 'GET' }, { headers: { 'x-api-key': key } });
}

/** A plain forwarder in front of `upstream`: every request goes to the path `pathOf()` names now. */
async function startForwarder(
  upstream: string,
  pathOf: () => string,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const headers = Object.fromEntries(
        Object.entries(request.headers).filter(([name]) => name !== 'host' && name !== 'content-length'),
      ) as Record<string, string>;
      fetch(`${upstream}${pathOf()}`, {
        method: request.method!,
        headers,
        ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
      }).then(
        async (answer) => {
          const body = Buffer.from(await answer.arrayBuffer());
          answer.headers.forEach((value, name) => {
            if (name !== 'content-length' && name !== 'transfer-encoding' && name !== 'connection')
              response.setHeader(name, value);
          });
          response.writeHead(answer.status).end(body);
        },
        () => response.writeHead(502).end(),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Our vouchers written after the one with id `id`, oldest first. */
function vouchersSince(id: bigint) {
  return db.selectFrom('payer_vouchers').selectAll().where('id', '>', id).orderBy('id').execute();
}

/** The id of the newest voucher so far (0 when none). */
async function lastVoucherId(): Promise<bigint> {
  const row = await db.selectFrom('payer_vouchers').select('id').orderBy('id', 'desc').executeTakeFirst();
  return row?.id ?? 0n;
}

async function theChannel() {
  const channels = await db.selectFrom('payer_channels').selectAll().execute();
  expect(channels).toHaveLength(1);
  return channels[0]!;
}

describe('/proxy to a batch-settlement target', () => {
  it('is priced by both dry runs as a channel payment, and opens nothing', async () => {
    const { key } = await createTestAccount(db, { credits: 100n });
    const sim = await t.client.post(
      '/proxy/sim',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(sim.status, sim.text).toBe(200);
    expect(sim.body).toMatchObject({
      requiresPayment: true,
      paymentRequirements: { scheme: 'batch-settlement', network: NETWORK, maxAmountRequired: PRICE.toString() },
      pricing: { scheme: 'batch-settlement', maxTotalCredits: Number(PER_CALL_CREDITS) },
    });
    // Nothing moved: no channel, no voucher.
    expect(await db.selectFrom('payer_channels').selectAll().execute()).toEqual([]);
    const relaySim = await t.client.post('/relay/sim', { api_url: target.routes.paid.url, method: 'GET' });
    expect(relaySim.status, relaySim.text).toBe(200);
    expect(relaySim.body).toMatchObject({ pricing: { scheme: 'batch-settlement' } });
  });

  it(`pays ${CALLS} calls from one channel: one deposit, one voucher per call, the seller claims exactly what it charged`, async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 10_000n });
    const before = {
      ours: await peers.usdcBalance(NETWORK, ours()),
      payTo: await peers.usdcBalance(NETWORK, target.payTo),
    };
    target.reset();
    for (let call = 1; call <= CALLS; call++) {
      const res = await proxy(key, target.routes.paid.url);
      expect(res.status, res.text).toBe(200);
      // Our own receipt: the charge is the seller's, no transaction per call.
      const receipt = JSON.parse(Buffer.from(res.headers.get('x-payment-response')!, 'base64').toString()) as Record<
        string,
        unknown
      >;
      expect(receipt).toMatchObject({ success: true, transaction: '', network: NETWORK, amount: PRICE.toString() });
      expect(res.headers.get('x-credits-charged')).toBe(PER_CALL_CREDITS.toString());
      // Our tokens moved once, at the first call's deposit.
      expect(await peers.usdcBalance(NETWORK, ours())).toBe(before.ours - DEPOSIT);
    }
    const sent = target.requests.filter((request) => request.payment !== null);
    expect(sent).toHaveLength(CALLS);
    const vouchers = await db.selectFrom('payer_vouchers').selectAll().orderBy('id').execute();
    expect(vouchers.map((voucher) => [voucher.state, voucher.ceiling_atomic, voucher.deposit_atomic])).toEqual(
      Array.from({ length: CALLS }, (_, index) => [
        'charged',
        String(BigInt(index + 1) * PRICE),
        index === 0 ? DEPOSIT.toString() : null,
      ]),
    );
    const channel = await theChannel();
    expect(channel).toMatchObject({
      charged_atomic: String(BigInt(CALLS) * PRICE),
      signed_max_atomic: String(BigInt(CALLS) * PRICE),
      balance_atomic: DEPOSIT.toString(),
      deposited_atomic: DEPOSIT.toString(),
    });
    // Our money still in the channel (deposited, not charged) counts in our float on its network.
    const metrics = await t.client.get('/metrics');
    expect(metrics.text).toContain(
      `prs_wallet_channel_funds_micro_usdc{network="${NETWORK}"} ${DEPOSIT - BigInt(CALLS) * PRICE}`,
    );
    // Credits: each call charged its price plus the fee, nothing else held.
    expect(await organisationBalance(db, organisationId)).toBe(10_000n - BigInt(CALLS) * PER_CALL_CREDITS);
    expect(await ledgerSums(db, organisationId)).toMatchObject({ charge: BigInt(CALLS) * PER_CALL_CREDITS });

    // The seller claims and settles: the chain shows exactly the charged total moved to its payTo.
    await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, channel.channel_id)).toEqual({
      balance: DEPOSIT,
      totalClaimed: BigInt(CALLS) * PRICE,
    });
    expect(await peers.usdcBalance(NETWORK, target.payTo)).toBe(before.payTo + BigInt(CALLS) * PRICE);
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before.ours - DEPOSIT);
  });

  it('two instances on one database take turns on our channel: each signs on the charge the other recorded', async () => {
    // Another instance of the service on the same database (no worker of its own).
    const second = await startService(
      loadConfig({
        ...peersEnv(peers, [new URL(breaking!.url).host]),
        PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(MULTIPLIER),
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'silent',
        RUN_WORKER: 'false',
        DATABASE_URL: t.database.url,
      }),
      { logger: pino({ level: 'silent' }), resolver: tableResolver() },
    );
    try {
      const secondClient = contractClient(second.url);
      const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
      const base = BigInt((await theChannel()).charged_atomic);
      const since = await lastVoucherId();
      target.reset();
      // Each instance keeps the channel as its last call left it; every turn of the other changes it.
      for (const client of [t.client, secondClient, t.client, secondClient, t.client]) {
        const res = await client.post(
          '/proxy',
          { api_url: target.routes.paid.url, method: 'GET' },
          { headers: { 'x-api-key': key } },
        );
        expect(res.status, res.text).toBe(200);
      }
      // One voucher per call, each on the charge before it: no stale base, no corrective 402.
      expect(target.requests.filter((request) => request.payment !== null)).toHaveLength(5);
      const vouchers = await vouchersSince(since);
      expect(vouchers.map((voucher) => [voucher.state, voucher.base_atomic])).toEqual(
        [0n, 1n, 2n, 3n, 4n].map((index) => ['charged', String(base + index * PRICE)]),
      );
      expect((await theChannel()).charged_atomic).toBe(String(base + 5n * PRICE));
      expect(await organisationBalance(db, organisationId)).toBe(1_000n - 5n * PER_CALL_CREDITS);

      // Both at once, three calls each: a call whose instance finds the channel's lock taken waits
      // for it and signs on what the other charged.
      const concurrentSince = await lastVoucherId();
      target.reset();
      const answers = await Promise.all(
        [t.client, secondClient, t.client, secondClient, t.client, secondClient].map((client) =>
          client.post('/proxy', { api_url: target.routes.paid.url, method: 'GET' }, { headers: { 'x-api-key': key } }),
        ),
      );
      for (const res of answers) expect(res.status, res.text).toBe(200);
      const concurrent = await vouchersSince(concurrentSince);
      expect(concurrent.map((voucher) => [voucher.state, voucher.base_atomic])).toEqual(
        [5n, 6n, 7n, 8n, 9n, 10n].map((index) => ['charged', String(base + index * PRICE)]),
      );
      expect(target.requests.filter((request) => request.payment !== null)).toHaveLength(6);
      expect(await organisationBalance(db, organisationId)).toBe(1_000n - 11n * PER_CALL_CREDITS);
    } finally {
      await second.stop();
    }
  });

  it("keeps a seller's 402 for the next identical call (one request per paid call), and asks again when its price changed", async () => {
    frontPath = new URL(target.routes.paid.url).pathname;
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const base = BigInt((await theChannel()).charged_atomic);
    const since = await lastVoucherId();
    target.reset();
    for (let call = 1; call <= 3; call++) {
      const res = await proxy(key, `${front!.url}/priced`);
      expect(res.status, res.text).toBe(200);
    }
    // The first call asked the price, then paid; the next two paid at once.
    expect(target.requests.map((request) => [request.route, request.payment !== null])).toEqual([
      ['paid', false],
      ['paid', true],
      ['paid', true],
      ['paid', true],
    ]);
    // The seller's price doubles: the voucher of the kept 402 is refused, the price asked again and paid.
    frontPath = new URL(target.routes.paidEcho.url).pathname;
    target.reset();
    const changed = await proxy(key, `${front!.url}/priced`);
    expect(changed.status, changed.text).toBe(200);
    const doubled = proxyCredits(2n * PRICE, 3).totalCredits;
    expect(changed.headers.get('x-credits-charged')).toBe(doubled.toString());
    expect(target.requests.map((request) => [request.route, request.payment !== null])).toEqual([
      ['paidEcho', true],
      ['paidEcho', false],
      ['paidEcho', true],
    ]);
    const vouchers = await vouchersSince(since);
    expect(vouchers.map((voucher) => [voucher.state, voucher.base_atomic, voucher.ceiling_atomic])).toEqual([
      ['charged', String(base), String(base + PRICE)],
      ['charged', String(base + PRICE), String(base + 2n * PRICE)],
      ['charged', String(base + 2n * PRICE), String(base + 3n * PRICE)],
      ['not_charged', String(base + 3n * PRICE), String(base + 4n * PRICE)],
      ['charged', String(base + 3n * PRICE), String(base + 5n * PRICE)],
    ]);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - 3n * PER_CALL_CREDITS - doubled);
  });

  it('holds the credits in the statement that records the voucher: too few credits write nothing; under an Idempotency-Key it pays once', async () => {
    const channel = await theChannel();
    const since = await lastVoucherId();
    const short = await createTestAccount(db, { credits: PER_CALL_CREDITS - 1n });
    const refused = await proxy(short.key, target.routes.paid.url);
    expect(refused.status, refused.text).toBe(402);
    expect(refused.body).toMatchObject({ code: 'insufficient_credits' });
    // No voucher, no payment row, the channel as it was, nothing held.
    expect(await db.selectFrom('payer_vouchers').select('id').where('id', '>', since).execute()).toEqual([]);
    expect(
      await db.selectFrom('proxy_payments').select('id').where('organisation_id', '=', short.organisationId).execute(),
    ).toEqual([]);
    expect(await theChannel()).toMatchObject({
      charged_atomic: channel.charged_atomic,
      signed_max_atomic: channel.signed_max_atomic,
    });
    expect(await organisationBalance(db, short.organisationId)).toBe(PER_CALL_CREDITS - 1n);

    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const once = { headers: { 'x-api-key': key, 'idempotency-key': 'channel-once-1' } };
    const body = { api_url: target.routes.paid.url, method: 'GET' };
    const first = await t.client.post('/proxy', body, once);
    expect(first.status, first.text).toBe(200);
    const again = await t.client.post('/proxy', body, once);
    expect(again.status, again.text).toBe(200);
    expect(await db.selectFrom('payer_vouchers').select('state').where('id', '>', since).execute()).toEqual([
      { state: 'charged' },
    ]);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - PER_CALL_CREDITS);
  });

  it('a target that fails is not charged, and the next voucher is signed on the same base', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const base = BigInt((await theChannel()).charged_atomic);
    const failed = await proxy(key, target.routes.error.url);
    expect(failed.status, failed.text).toBe(502);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n);
    const paid = await proxy(key, target.routes.paid.url);
    expect(paid.status, paid.text).toBe(200);
    const [failedVoucher, paidVoucher] = await db
      .selectFrom('payer_vouchers')
      .selectAll()
      .orderBy('id', 'desc')
      .limit(2)
      .execute()
      .then((rows) => rows.reverse());
    expect(failedVoucher).toMatchObject({ state: 'not_charged', base_atomic: base.toString() });
    expect(paidVoucher).toMatchObject({
      state: 'charged',
      base_atomic: base.toString(),
      ceiling_atomic: String(base + PRICE),
    });
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - PER_CALL_CREDITS);
  });

  it("adopts a seller's corrective 402 only once our own voucher signature proves it, and pays on the corrected base", async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const channel = await theChannel();
    const truth = BigInt(channel.charged_atomic);
    // Our record falls one price behind the seller (as a restore of an older backup would leave it).
    await db
      .updateTable('payer_channels')
      .set({ charged_atomic: String(truth - PRICE) })
      .where('channel_id', '=', channel.channel_id)
      .execute();
    target.reset();
    const res = await proxy(key, target.routes.paid.url);
    expect(res.status, res.text).toBe(200);
    // Two vouchers went out: one on the stale base (corrected by the seller), one on the proven base.
    const sent = target.requests.filter((request) => request.payment !== null);
    expect(sent).toHaveLength(2);
    const last = await db.selectFrom('payer_vouchers').selectAll().orderBy('id', 'desc').limit(2).execute();
    expect(last.map((voucher) => [voucher.state, voucher.base_atomic])).toEqual([
      ['charged', truth.toString()],
      ['not_charged', String(truth - PRICE)],
    ]);
    expect((await theChannel()).charged_atomic).toBe(String(truth + PRICE));
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - PER_CALL_CREDITS);
  });

  it('refuses a corrective 402 our key did not sign, and moves nothing', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const channel = await theChannel();
    const receiver = target.batchSettlement[0]!;
    const stored = await receiver.storage.get(channel.channel_id);
    expect(stored).toBeDefined();
    // The seller claims a higher charge than any voucher of ours allows, with a signature not ours.
    await receiver.storage.updateChannel(channel.channel_id, (current) =>
      current === undefined
        ? undefined
        : {
            ...current,
            chargedCumulativeAmount: (BigInt(current.chargedCumulativeAmount) + 5n * PRICE).toString(),
            signedMaxClaimable: (BigInt(current.chargedCumulativeAmount) + 5n * PRICE).toString(),
            signature: `0x${'11'.repeat(65)}`,
          },
    );
    const ourCharged = (await theChannel()).charged_atomic;
    const res = await proxy(key, target.routes.paid.url);
    expect(res.status, res.text).toBe(502);
    expect((await theChannel()).charged_atomic).toBe(ourCharged);
    expect(await organisationBalance(db, organisationId)).toBe(1_000n);
    // The seller's record restored, our next call pays on our base again.
    await receiver.storage.updateChannel(channel.channel_id, () => stored);
    const again = await proxy(key, target.routes.paid.url);
    expect(again.status, again.text).toBe(200);
  });

  it('a voucher whose answer was lost is charged once, when the next exchange proves the seller committed it', async () => {
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const charged = BigInt((await theChannel()).charged_atomic);
    cutNext = true;
    const lost = await proxy(key, `${breaking!.url}${new URL(target.routes.paid.url).pathname}`);
    expect(lost.status, lost.text).toBe(502);
    const webhookId = (lost.body as { webhook_id?: string }).webhook_id!;
    expect(webhookId).toBeDefined();
    // Held, not charged, while nothing says whether the seller kept it.
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - PER_CALL_CREDITS);
    const [unknown] = await db.selectFrom('payer_vouchers').selectAll().orderBy('id', 'desc').limit(1).execute();
    expect(unknown).toMatchObject({ state: 'unknown', ceiling_atomic: String(charged + PRICE) });

    // The next call on the channel: the seller corrects our base to include the lost voucher.
    const next = await proxy(key, target.routes.paid.url);
    expect(next.status, next.text).toBe(200);
    expect(
      await db.selectFrom('payer_vouchers').select('state').where('id', '=', unknown!.id).executeTakeFirst(),
    ).toEqual({
      state: 'charged',
    });
    const record = await pollWebhook(t, webhookId, 60_000);
    expect(record.status, record.text).toBe(200);
    expect(record.body).toMatchObject({ status: 'success' });
    // Two calls, two charges: the lost one once, the next one once.
    expect(await organisationBalance(db, organisationId)).toBe(1_000n - 2n * PER_CALL_CREDITS);
    expect((await theChannel()).charged_atomic).toBe(String(charged + 2n * PRICE));
  });
});
