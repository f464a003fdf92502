// One claim transaction covers many channels: 50 payers each open a channel with our /relay (the
// unmodified @x402/fetch with @x402/evm's batch-settlement client, one deposit and one call each),
// then the channel_claims job claims all 50 in a single claimWithSignature and settles once; every
// channel's totalClaimed and our wallet's balance are read from the chain.
import { InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { sql } from 'kysely';
import { getAddress, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers } from '../../devnet/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { channelClientFetch, receiverChannelsEnv } from '../support/channels';
import { peersEnv } from '../support/proxy';
import { relayRequest } from '../support/relay';
import { tableResolver } from '../support/resolver';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia' as const;
const PRICE = 10_000n;
/** ceil(10,000 x 1.03). */
const TOTAL = 10_300n;
const CHANNELS = 50;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  try {
    t = await startTestService(
      {
        ...peersEnv(peers),
        ...receiverChannelsEnv(NETWORK, 2),
      },
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

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

describe('claims in batches', () => {
  it(`claims ${CHANNELS} channels in one claimWithSignature and settles them in one transfer`, async () => {
    const chain = peers.evmChains[NETWORK]!;
    const target = peers.targets[NETWORK]!;
    const ours = getAddress(peers.wallets.service.evm.address);
    const channelIds: Hex[] = [];
    for (let i = 0; i < CHANNELS; i++) {
      const payer = privateKeyToAccount(generatePrivateKey());
      await peers.mint(NETWORK, payer.address, 100_000n);
      const pay = channelClientFetch(peers, NETWORK, payer, new InMemoryClientChannelStorage());
      const res = await pay(
        `${t.service.url}/relay`,
        relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: NETWORK }),
      );
      expect(res.status).toBe(200);
    }
    const rows = await db.selectFrom('receiver_channels').select(['channel_id', 'charged_cumulative']).execute();
    expect(rows).toHaveLength(CHANNELS);
    for (const row of rows) {
      expect(BigInt(row.charged_cumulative)).toBe(TOTAL);
      channelIds.push(row.channel_id as Hex);
    }
    const oursBefore = await peers.usdcBalance(NETWORK, ours);
    await sql`select graphile_worker.add_job('channel_claims', ${JSON.stringify({ force: true })}::json)`.execute(db);
    const records = await until(
      () => db.selectFrom('receiver_channel_claims').selectAll().orderBy('id').execute(),
      (found) => found.length === 2 && found.every((row) => row.state !== 'sent'),
      'the claim and settle records',
    );
    expect(records.map((row) => [row.kind, row.state, row.channels])).toEqual([
      ['claim', 'confirmed', CHANNELS],
      ['settle', 'confirmed', 0],
    ]);
    for (const channelId of channelIds) {
      const [, totalClaimed] = await chain.publicClient.readContract({
        address: BATCH_SETTLEMENT_ADDRESS,
        abi: batchSettlementAbi,
        functionName: 'channels',
        args: [channelId],
      });
      expect(totalClaimed).toBe(TOTAL);
    }
    expect(await peers.usdcBalance(NETWORK, ours)).toBe(oursBefore + BigInt(CHANNELS) * TOTAL);
  });

  it('a channel the chain cannot honour does not hold back the claims of the others in its batch', async () => {
    const chain = peers.evmChains[NETWORK]!;
    const target = peers.targets[NETWORK]!;
    const payer = privateKeyToAccount(generatePrivateKey());
    await peers.mint(NETWORK, payer.address, 100_000n);
    const pay = channelClientFetch(peers, NETWORK, payer, new InMemoryClientChannelStorage());
    const res = await pay(
      `${t.service.url}/relay`,
      relayRequest({ api_url: target.routes.paid.url, method: 'GET', network: NETWORK }),
    );
    expect(res.status).toBe(200);
    const healthy = await db
      .selectFrom('receiver_channels')
      .selectAll()
      .where('payer', '=', payer.address.toLowerCase())
      .executeTakeFirstOrThrow();
    // Our mirror says a second channel owes us, but the chain holds nothing in it (a chain reset
    // under a kept database; a payer who withdrew before our claim looks the same to the claim).
    const config = { ...(healthy.config as Record<string, unknown>), salt: `0x${'ab'.repeat(32)}` };
    const vanished = `0x${'cd'.repeat(32)}`;
    await db
      .insertInto('receiver_channels')
      .values({ ...healthy, channel_id: vanished, config: JSON.stringify(config) })
      .execute();
    const before = await db.selectFrom('receiver_channel_claims').select('id').execute();
    await sql`select graphile_worker.add_job('channel_claims', ${JSON.stringify({ force: true })}::json)`.execute(db);
    const records = await until(
      () =>
        db
          .selectFrom('receiver_channel_claims')
          .selectAll()
          .where(
            'id',
            'not in',
            before.map((row) => row.id),
          )
          .orderBy('id')
          .execute(),
      (found) => found.length === 2 && found.every((row) => row.state !== 'sent'),
      'the claim and settle records',
    );
    expect(records.map((row) => [row.kind, row.state, row.channels])).toEqual([
      ['claim', 'confirmed', 1],
      ['settle', 'confirmed', 0],
    ]);
    const [, totalClaimed] = await chain.publicClient.readContract({
      address: BATCH_SETTLEMENT_ADDRESS,
      abi: batchSettlementAbi,
      functionName: 'channels',
      args: [healthy.channel_id as Hex],
    });
    expect(totalClaimed).toBe(TOTAL);
  });
});
