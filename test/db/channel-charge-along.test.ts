// A channel charge committed with what it pays for (commitChannelChargeAlong, used by credit
// purchases): the charge row, the channel's cumulative amount and the caller's writes are one
// transaction. A failure after the caller's writes leaves neither (no credit, no charge, the lease
// still the request's to release); a success leaves both; a request that lost its lease writes
// nothing; and a second commit of the same cumulative amount is refused by the charge row's unique index, before any credit.
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commitChannelChargeAlong } from '../../payments/incoming/channels/receive';
import type { ChannelReservation } from '../../payments/incoming/channels/receive';
import { findChannel } from '../../payments/incoming/channels/store';
import { createTestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database.drop();
});

const db = () => database.handle.db;
const address: Hex = `0x${'ab'.repeat(20)}`;
const PRICE = 25_000n;

/** A channel with `charged` committed and a request holding its lease, as acceptChannelPayment leaves it. */
async function leasedChannel(n: number, charged: bigint): Promise<ChannelReservation> {
  const channelId: Hex = `0x${n.toString(16).padStart(64, '0')}`;
  const pendingId = randomUUID();
  await sql`
    insert into receiver_channels (channel_id, network, payer, payer_authorizer, receiver, token, withdraw_delay, config,
      charged_cumulative, signed_max_claimable, balance, total_claimed, withdraw_requested_at, pending_id, pending_until)
    values (${channelId}, 'base-sepolia', ${address}, ${address}, ${address}, ${address}, 86400, '{}'::jsonb,
      ${charged}, ${charged}, 1000000, 0, 0, ${pendingId}, now() + interval '1 minute')`.execute(db());
  const channel = await findChannel(db(), channelId);
  return {
    network: 'base-sepolia',
    channelId,
    pendingId,
    payer: address,
    increment: PRICE,
    voucher: { maxClaimableAmount: charged + PRICE, signature: `0x${'11'.repeat(65)}` },
    channel: channel!,
  };
}

async function balanceOf(organisationId: bigint): Promise<bigint> {
  const row = await db()
    .selectFrom('organisations')
    .select('credit_balance')
    .where('id', '=', organisationId)
    .executeTakeFirstOrThrow();
  return row.credit_balance;
}

async function chargesOf(channelId: Hex) {
  return db()
    .selectFrom('receiver_channel_charges')
    .select(['cumulative', 'amount', 'target_url'])
    .where('channel_id', '=', channelId)
    .execute();
}

const credit = (organisationId: bigint) =>
  sql`update organisations set credit_balance = credit_balance + 25 where id = ${organisationId}`;

describe('a channel charge committed with its credits', () => {
  it('a failure after the credit was written leaves neither the credit nor the charge; the next commit writes both', async () => {
    const { organisationId } = await createTestAccount(db());
    const reservation = await leasedChannel(1, 50_000n);
    await expect(
      commitChannelChargeAlong({ db: db() }, reservation, {
        reference: 'https://service.example/v1/credits/purchase',
        along: async (tx) => {
          await credit(organisationId).execute(tx);
          throw new Error('the process stopped here');
        },
      }),
    ).rejects.toThrow('the process stopped here');
    expect(await balanceOf(organisationId)).toBe(0n);
    expect(await chargesOf(reservation.channelId)).toEqual([]);
    const untouched = await findChannel(db(), reservation.channelId);
    expect(untouched).toMatchObject({ chargedCumulative: 50_000n, pendingId: reservation.pendingId });

    const committed = await commitChannelChargeAlong({ db: db() }, reservation, {
      reference: 'https://service.example/v1/credits/purchase',
      along: async (tx, charge) => {
        await credit(organisationId).execute(tx);
        return charge;
      },
    });
    expect(committed).toMatchObject({ ok: true, charged: PRICE, value: { cumulative: 75_000n, amount: PRICE } });
    expect(await balanceOf(organisationId)).toBe(25n);
    expect(await chargesOf(reservation.channelId)).toEqual([
      { cumulative: '75000', amount: '25000', target_url: 'https://service.example/v1/credits/purchase' },
    ]);
    expect(await findChannel(db(), reservation.channelId)).toMatchObject({
      chargedCumulative: 75_000n,
      signedMaxClaimable: 75_000n,
      pendingId: undefined,
    });
  });

  it('a request that lost its lease writes nothing: its own writes are not even asked for', async () => {
    const { organisationId } = await createTestAccount(db());
    const reservation = await leasedChannel(2, 0n);
    let asked = false;
    const committed = await commitChannelChargeAlong(
      { db: db() },
      { ...reservation, pendingId: randomUUID() },
      {
        reference: 'https://service.example/v1/credits/purchase',
        along: async (tx) => {
          asked = true;
          await credit(organisationId).execute(tx);
        },
      },
    );
    expect(committed).toMatchObject({ ok: false, refusal: { code: 'invalid_batch_settlement_evm_channel_busy' } });
    expect(asked).toBe(false);
    expect(await balanceOf(organisationId)).toBe(0n);
    expect(await chargesOf(reservation.channelId)).toEqual([]);
  });

  it('the same cumulative amount committed twice is refused: no second credit', async () => {
    const { organisationId } = await createTestAccount(db());
    const reservation = await leasedChannel(3, 0n);
    const along = async (tx: Parameters<Parameters<typeof commitChannelChargeAlong>[2]['along']>[0]) => {
      await credit(organisationId).execute(tx);
    };
    const reference = 'https://service.example/v1/credits/purchase';
    expect(await commitChannelChargeAlong({ db: db() }, reservation, { reference, along })).toMatchObject({ ok: true });
    // The mirror set back under a fresh lease, as if the first commit had never been seen: the charge row still refuses it.
    const pendingId = randomUUID();
    await sql`update receiver_channels set charged_cumulative = 0, pending_id = ${pendingId},
      pending_until = now() + interval '1 minute' where channel_id = ${reservation.channelId}`.execute(db());
    await expect(
      commitChannelChargeAlong({ db: db() }, { ...reservation, pendingId }, { reference, along }),
    ).rejects.toThrow(/unique|duplicate/);
    expect(await balanceOf(organisationId)).toBe(25n);
    expect(await chargesOf(reservation.channelId)).toHaveLength(1);
  });
});
