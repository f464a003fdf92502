// Idle payer channels given back: /proxy pays the unmodified @x402/express 2.27 batch-settlement
// target on Polygon Amoy through our channel, the seller claims, and once the channel is idle the
// worker task (run here with a clock days ahead) asks the seller for a cooperative refund, which the
// seller's unmodified facilitator executes (refundWithSignature): exactly the balance less the
// claimed charges comes back to our wallet. A seller that does not refund (in front of it, a proxy
// that fails every paid request) gets our initiateWithdraw instead, and once the chain's clock has
// passed the withdraw delay, our finalizeWithdraw takes the rest back. The float figures (/metrics
// and the operator's float report) count a channel being withdrawn and drop what came back; a call
// to the same seller meanwhile opens a new channel. A channel with a voucher not yet decided is left
// open until it is. Every amount is read from the chain.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startFaultProxy, type FaultProxy } from '../../devnet/faults';
import { batchTargetName, startPeers, type Peers, type Target } from '../../devnet/index';
import type { Clock } from '../../payments/basics/clock';
import { floatReport } from '../../server/floatCommand';
import { payerChannelIdle } from '../../worker/tasks/payerChannelIdle';
import { createTestAccount } from '../support/accounts';
import { channelOnChain } from '../support/channels';
import { peersEnv } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'polygon-amoy' as const;
const PRICE = 10_000n;
const MULTIPLIER = 25n;
const DEPOSIT = MULTIPLIER * PRICE;

let peers: Peers;
let t: TestService;
let db: Db;
let target: Target;
/** In front of the target: while `refusing`, every request carrying a payment fails (502) and never reaches it. */
let refusingProxy: FaultProxy | undefined;
let refusing = false;
let key: string;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  try {
    target = peers.targets[batchTargetName(NETWORK)]!;
    refusingProxy = await startFaultProxy({
      upstream: target.url,
      choose: (request) => (refusing && request.headers['payment-signature'] ? 'error5xx' : 'pass'),
    });
    t = await startTestService(
      {
        ...peersEnv(peers, [new URL(refusingProxy.url).host]),
        PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(MULTIPLIER),
        // The task is run by the test, with its own clock: no worker runs it meanwhile.
        RUN_WORKER: 'false',
      },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
    ({ key } = await createTestAccount(db, { credits: 100_000n }));
  } catch (error) {
    await refusingProxy?.close();
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await refusingProxy?.close();
  await ifStarted(peers)?.stop();
});

const ours = () => peers.wallets.service.evm.address;
const daysAhead = (days: number): Clock => ({ now: () => new Date(Date.now() + days * 86_400_000) });

/** One run of the worker task, as graphile-worker runs it (the payload of a cron run). */
async function runIdleTask(clock: Clock = t.service.deps.clock) {
  await payerChannelIdle({ ...t.service.deps, clock })({}, undefined as never);
}

async function proxy(url: string) {
  const res = await t.client.post('/proxy', { api_url: url, method: 'GET' }, { headers: { 'x-api-key': key } });
  expect(res.status, res.text).toBe(200);
}

async function channels() {
  return db.selectFrom('payer_channels').selectAll().orderBy('created_at').execute();
}

/** Our channel funds as /metrics and the operator's float report show them, in micro-USDC (USDC has 6 decimals here). */
async function floatFigures(): Promise<{ gauge: bigint; report: string }> {
  const metrics = await t.client.get('/metrics');
  const line = new RegExp(`^prs_wallet_channel_funds_micro_usdc\\{network="${NETWORK}"\\} (\\d+)$`, 'm').exec(
    metrics.text,
  );
  expect(line, 'the channel funds gauge').not.toBeNull();
  const lines: string[] = [];
  await floatReport(db, t.config, (text) => lines.push(text), { stored: true });
  const held = lines.find((text) => text.includes('held in channels'));
  expect(held).toBeDefined();
  return { gauge: BigInt(line![1]!), report: held!.replace(/\s+/g, ' ').trim() };
}

const usdc = (micro: bigint) =>
  `${micro / 1_000_000n}${micro % 1_000_000n ? `.${(micro % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '')}` : ''}`;

describe('idle payer channels', () => {
  it('are left open while they are used or not idle long enough', async () => {
    await proxy(target.routes.paid.url);
    await runIdleTask();
    await runIdleTask(daysAhead(0.5));
    expect((await channels()).map((channel) => channel.state)).toEqual(['open']);
  });

  it('idle, get a cooperative refund from the seller: exactly the balance less the claimed charges comes back', async () => {
    await proxy(target.routes.paid.url);
    await proxy(target.routes.paid.url);
    const [channel] = await channels();
    const charged = 3n * PRICE;
    expect(channel).toMatchObject({ charged_atomic: charged.toString(), balance_atomic: DEPOSIT.toString() });
    await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, channel!.channel_id)).toEqual({
      balance: DEPOSIT,
      totalClaimed: charged,
    });
    expect(await floatFigures()).toEqual({
      gauge: DEPOSIT - charged,
      report: `held in channels ${usdc(DEPOSIT - charged)} USDC`,
    });
    const before = await peers.usdcBalance(NETWORK, ours());

    await runIdleTask(daysAhead(2));

    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before + DEPOSIT - charged);
    expect(await channelOnChain(peers, NETWORK, channel!.channel_id)).toEqual({
      balance: charged,
      totalClaimed: charged,
    });
    const [after] = await channels();
    expect(after).toMatchObject({ state: 'closed', balance_atomic: charged.toString(), withdraw_tx_hash: null });
    expect(after!.refund_requested_at).not.toBeNull();
    expect(after!.refund_url).toBe(target.routes.paid.url);
    expect(after!.closing_details).toMatch(/refunded$/);
    expect(await floatFigures()).toEqual({ gauge: 0n, report: 'held in channels 0 USDC' });
    // A second run finds nothing to do.
    await runIdleTask(daysAhead(2));
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before + DEPOSIT - charged);
  });

  it('idle, with a seller that does not refund: withdrawn by our initiateWithdraw, then finalizeWithdraw once the delay has passed', async () => {
    const refusedUrl = `${refusingProxy!.url}${new URL(target.routes.paid.url).pathname}`;
    await proxy(refusedUrl);
    await proxy(refusedUrl);
    const second = (await channels())[1]!;
    expect(second).toMatchObject({ state: 'open', balance_atomic: DEPOSIT.toString() });
    const charged = 2n * PRICE;
    await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, second.channel_id)).toEqual({
      balance: DEPOSIT,
      totalClaimed: charged,
    });
    const before = await peers.usdcBalance(NETWORK, ours());

    refusing = true;
    const refusedBefore = refusingProxy!.counts.error5xx;
    await runIdleTask(daysAhead(2));
    // The seller was asked (and never reached): our withdrawal of the rest is pending on chain.
    expect(refusingProxy!.counts.error5xx).toBe(refusedBefore + 1);
    const withdrawing = (await channels())[1]!;
    expect(withdrawing).toMatchObject({
      state: 'closing',
      withdraw_amount_atomic: String(DEPOSIT - charged),
      withdraw_tx_state: 'confirmed',
      finalize_tx_hash: null,
    });
    expect(withdrawing.closing_details).toMatch(/^withdrawal of \d+ started/);
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before);
    // Still ours while it is withdrawn: it counts in the float.
    expect(await floatFigures()).toEqual({
      gauge: DEPOSIT - charged,
      report: `held in channels ${usdc(DEPOSIT - charged)} USDC`,
    });

    // No voucher is signed on a channel being withdrawn: a call to the same seller opens a new one.
    refusing = false;
    await proxy(target.routes.paid.url);
    const all = await channels();
    expect(all.map((channel) => channel.state)).toEqual(['closed', 'closing', 'open']);
    const third = all[2]!;
    expect(third.channel_id).not.toBe(second.channel_id);
    expect(
      await db.selectFrom('payer_vouchers').select('id').where('channel_id', '=', second.channel_id).execute(),
    ).toHaveLength(2);
    expect((await floatFigures()).gauge).toBe(DEPOSIT - charged + (DEPOSIT - PRICE));

    // Before the delay has passed by the chain's clock, nothing moves.
    await runIdleTask();
    expect((await channels())[1]).toMatchObject({ state: 'closing', finalize_tx_hash: null });
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before - DEPOSIT);

    const chain = peers.evmChains[NETWORK]!;
    await chain.publicClient.request({ method: 'evm_increaseTime', params: [second.withdraw_delay] } as never);
    await chain.mineUntil(withdrawing.withdraw_finalize_after!);
    await runIdleTask();

    // The rest (deposit less the claimed charges) is back; the seller's claims stay in the channel.
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before - DEPOSIT + (DEPOSIT - charged));
    expect(await channelOnChain(peers, NETWORK, second.channel_id)).toEqual({
      balance: charged,
      totalClaimed: charged,
    });
    const withdrawn = (await channels())[1]!;
    expect(withdrawn).toMatchObject({
      state: 'closed',
      finalize_tx_state: 'confirmed',
      balance_atomic: charged.toString(),
    });
    expect(withdrawn.closing_details).toMatch(/withdrawn$/);
    expect(await floatFigures()).toEqual({
      gauge: DEPOSIT - PRICE,
      report: `held in channels ${usdc(DEPOSIT - PRICE)} USDC`,
    });
  });
  it('idle with a voucher whose answer was lost: refunded with the seller claiming its charge in the same step, the voucher decided by the close', async () => {
    const third = (await channels())[2]!;
    expect(third).toMatchObject({ state: 'open', charged_atomic: PRICE.toString() });
    // A voucher whose answer was lost, as a call that died would leave it: no call comes to decide it.
    const lost = await db
      .insertInto('payer_vouchers')
      .values({
        channel_id: third.channel_id,
        base_atomic: PRICE,
        ceiling_atomic: 2n * PRICE,
        signature: `0x${'22'.repeat(65)}`,
        state: 'unknown',
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    // The seller never committed it; it has not claimed its one charge: its refund claims it and pays us the rest.
    const before = await peers.usdcBalance(NETWORK, ours());
    expect(await channelOnChain(peers, NETWORK, third.channel_id)).toEqual({ balance: DEPOSIT, totalClaimed: 0n });
    await runIdleTask(daysAhead(2));
    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before + DEPOSIT - PRICE);
    // The seller's charge claimed in the refund's transaction, the rest ours.
    expect(await channelOnChain(peers, NETWORK, third.channel_id)).toEqual({ balance: PRICE, totalClaimed: PRICE });
    expect((await channels())[2]).toMatchObject({ state: 'closed' });
    expect(await floatFigures()).toEqual({ gauge: 0n, report: 'held in channels 0 USDC' });
    // The close decided the lost voucher: the seller's final claim stayed below its ceiling.
    expect(
      await db
        .selectFrom('payer_vouchers')
        .select(['state', 'charged_atomic'])
        .where('id', '=', lost.id)
        .executeTakeFirst(),
    ).toEqual({ state: 'not_charged', charged_atomic: null });
  });
});
