// The channel figures /metrics and `npm run admin -- float` show, read from Postgres: the money our
// payer channels hold that sellers have not charged (prs_wallet_channel_funds_micro_usdc), and the
// nearest claim deadline of the channels we are paid through (prs_channel_claim_deadline_seconds,
// which the alert ClaimDeadlineNear watches): only a pending withdrawal with unclaimed charges counts.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimDeadlines, heldInChannels } from '../../payments/tracking/float';
import { createTestDatabase, type TestDatabase } from '../support/database';

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  await database.drop();
});

const id = (n: number) => `0x${n.toString(16).padStart(64, '0')}`;
const address = `0x${'ab'.repeat(20)}`;

async function receiverChannel(
  n: number,
  network: string,
  figures: { charged: bigint; claimed: bigint; withdrawRequestedAt: bigint; delay: number },
) {
  await sql`
    insert into receiver_channels (channel_id, network, payer, payer_authorizer, receiver, token, withdraw_delay, config,
      charged_cumulative, signed_max_claimable, balance, total_claimed, withdraw_requested_at)
    values (${id(n)}, ${network}, ${address}, ${address}, ${address}, ${address}, ${figures.delay}, '{}'::jsonb,
      ${figures.charged}, ${figures.charged}, ${figures.charged}, ${figures.claimed}, ${figures.withdrawRequestedAt})`.execute(
    database.handle.db,
  );
}

describe('channel figures', () => {
  it('the nearest claim deadline per network counts only pending withdrawals with unclaimed charges', async () => {
    expect(await claimDeadlines(database.handle.db)).toEqual(new Map());
    // No withdrawal pending; a withdrawal with everything claimed: no deadline.
    await receiverChannel(1, 'base', { charged: 500n, claimed: 100n, withdrawRequestedAt: 0n, delay: 900 });
    await receiverChannel(2, 'base', { charged: 500n, claimed: 500n, withdrawRequestedAt: 1_000n, delay: 900 });
    expect(await claimDeadlines(database.handle.db)).toEqual(new Map());
    // Two pending withdrawals with unclaimed charges: the nearer end of delay wins.
    await receiverChannel(3, 'base', { charged: 500n, claimed: 100n, withdrawRequestedAt: 5_000n, delay: 900 });
    await receiverChannel(4, 'base', { charged: 500n, claimed: 100n, withdrawRequestedAt: 2_000n, delay: 3_600 });
    await receiverChannel(5, 'polygon-amoy', { charged: 7n, claimed: 0n, withdrawRequestedAt: 10_000n, delay: 86_400 });
    expect(await claimDeadlines(database.handle.db)).toEqual(
      new Map([
        ['base', 5_600],
        ['polygon-amoy', 96_400],
      ]),
    );
  });

  it('the money in our payer channels is what they hold less what sellers charged, in micro-USDC', async () => {
    const { db } = database.handle;
    const channel = (n: number, network: string, balance: bigint, charged: bigint, state = 'open') =>
      sql`insert into payer_channels (channel_id, network, token, payer, payer_authorizer, receiver, receiver_authorizer,
            withdraw_delay, salt, deposited_atomic, charged_atomic, signed_max_atomic, balance_atomic, state)
          values (${id(n)}, ${network}, ${`0x${n.toString(16).padStart(40, '0')}`}, ${address}, ${address}, ${address}, ${address},
            900, ${id(n)}, ${balance}, ${charged}, ${charged}, ${balance}, ${state})`.execute(db);
    await channel(11, 'base-sepolia', 250_000n, 200_000n);
    await channel(12, 'base-sepolia', 100_000n, 0n);
    // Closed channels hold nothing of ours any more; MegaETH's token has 18 decimals.
    await channel(13, 'base-sepolia', 900_000n, 0n, 'closed');
    await channel(14, 'megaeth', 3n * 10n ** 12n, 10n ** 12n);
    expect(await heldInChannels.read(db)).toEqual(
      new Map([
        ['base-sepolia', 150_000n],
        ['megaeth', 2n],
      ]),
    );
  });
});
