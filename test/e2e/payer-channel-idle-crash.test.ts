// An idle payer channel whose giving back was cut by a crash: the process recorded the channel
// `closing`, its refund request, and the hash of an initiateWithdraw it signed, then died before
// the transaction left. The next run of the task finds the hash unknown to the chain, reads that no
// withdrawal is pending, and withdraws once (one withdrawal on chain, of the balance less the
// seller's charge); after the delay by the chain's clock, finalizeWithdraw returns exactly that to
// our wallet. The seller is the unmodified @x402/express 2.27 batch-settlement target on Polygon Amoy.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Hex } from 'viem';
import type { Db } from '../../db/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { batchTargetName, startPeers, type Peers, type Target } from '../../devnet/index';
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
const NEVER_SENT = `0x${'ab'.repeat(32)}`;

let peers: Peers;
let t: TestService;
let db: Db;
let target: Target;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  try {
    target = peers.targets[batchTargetName(NETWORK)]!;
    t = await startTestService(
      { ...peersEnv(peers), PAYER_CHANNEL_DEPOSIT_MULTIPLIER: String(MULTIPLIER), RUN_WORKER: 'false' },
      { resolver: tableResolver() },
    );
    db = t.database.handle.db;
  } catch (error) {
    await peers.stop();
    throw error;
  }
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const ours = () => peers.wallets.service.evm.address;

async function pendingWithdrawal(channelId: string): Promise<{ amount: bigint; initiatedAt: number }> {
  const [amount, initiatedAt] = await peers.evmChains[NETWORK]!.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'pendingWithdrawals',
    args: [channelId as Hex],
  });
  return { amount, initiatedAt };
}

async function runIdleTask() {
  await payerChannelIdle(t.service.deps)({}, undefined as never);
}

describe('an idle channel whose giving back was cut by a crash', () => {
  it('is withdrawn once by the next run, and finalized after the delay', async () => {
    const { key } = await createTestAccount(db, { credits: 10_000n });
    const res = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(res.status, res.text).toBe(200);
    const channel = await db.selectFrom('payer_channels').selectAll().executeTakeFirstOrThrow();
    expect(channel).toMatchObject({ charged_atomic: PRICE.toString(), balance_atomic: DEPOSIT.toString() });

    // What a run that died left: closing, the refund asked, a withdrawal signed and recorded, never sent.
    await db
      .updateTable('payer_channels')
      .set({
        state: 'closing',
        refund_requested_at: new Date(),
        withdraw_amount_atomic: DEPOSIT - PRICE,
        withdraw_tx_hash: NEVER_SENT,
        withdraw_tx_state: 'sent',
      })
      .where('channel_id', '=', channel.channel_id)
      .execute();
    const before = await peers.usdcBalance(NETWORK, ours());
    expect(await pendingWithdrawal(channel.channel_id)).toEqual({ amount: 0n, initiatedAt: 0 });

    await runIdleTask();
    const withdrawing = await db.selectFrom('payer_channels').selectAll().executeTakeFirstOrThrow();
    expect(withdrawing).toMatchObject({ state: 'closing', withdraw_tx_state: 'confirmed' });
    expect(withdrawing.withdraw_tx_hash).not.toBe(NEVER_SENT);
    // The seller's charge (not claimed yet) stays for it: we withdraw the rest.
    const pending = await pendingWithdrawal(channel.channel_id);
    expect(pending.amount).toBe(DEPOSIT - PRICE);
    expect(withdrawing.withdraw_finalize_after).toBe(BigInt(pending.initiatedAt + channel.withdraw_delay));

    // Again before the delay: nothing is sent twice.
    await runIdleTask();
    expect(await pendingWithdrawal(channel.channel_id)).toEqual(pending);
    expect(await db.selectFrom('payer_channels').selectAll().executeTakeFirstOrThrow()).toMatchObject({
      withdraw_tx_hash: withdrawing.withdraw_tx_hash,
      finalize_tx_hash: null,
    });

    const chain = peers.evmChains[NETWORK]!;
    await chain.publicClient.request({ method: 'evm_increaseTime', params: [channel.withdraw_delay] } as never);
    await chain.mineUntil(withdrawing.withdraw_finalize_after!);
    await runIdleTask();

    expect(await peers.usdcBalance(NETWORK, ours())).toBe(before + DEPOSIT - PRICE);
    expect(await channelOnChain(peers, NETWORK, channel.channel_id)).toEqual({ balance: PRICE, totalClaimed: 0n });
    expect(await db.selectFrom('payer_channels').selectAll().executeTakeFirstOrThrow()).toMatchObject({
      state: 'closed',
      finalize_tx_state: 'confirmed',
    });
    // The seller can still claim its charge: it stayed in the channel.
    await target.batchSettlement[0]!.manager.claimAndSettle();
    expect(await channelOnChain(peers, NETWORK, channel.channel_id)).toEqual({ balance: PRICE, totalClaimed: PRICE });
  });
});
