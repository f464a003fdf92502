/** Batch-settlement channels in tests: as the contract holds them, as we mirror them, and a channel client. */
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, type InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { sql } from 'kysely';
import type { Hex, PrivateKeyAccount } from 'viem';
import type { Db } from '../../db/index';
import type { EvmNetworkName, Peers } from '../../devnet/index';
import { BATCH_SETTLEMENT_ADDRESS, batchSettlementAbi } from '../../devnet/evm/batch-settlement';
import { contractFetch } from './relay';

/** The channel's balance and what its receiver has claimed, read from the chain. */
export async function channelOnChain(
  peers: Peers,
  network: EvmNetworkName,
  channelId: string,
): Promise<{ balance: bigint; totalClaimed: bigint }> {
  const [balance, totalClaimed] = await peers.evmChains[network]!.publicClient.readContract({
    address: BATCH_SETTLEMENT_ADDRESS,
    abi: batchSettlementAbi,
    functionName: 'channels',
    args: [channelId as Hex],
  });
  return { balance, totalClaimed };
}

/**
 * The unmodified @x402/fetch with @x402/evm's batch-settlement client (channels kept in `storage`)
 * over contractFetch, so every answer is checked against the OpenAPI document; every
 * PAYMENT-SIGNATURE it sends is noted in `sent`.
 */
export function channelClientFetch(
  peers: Peers,
  network: EvmNetworkName,
  account: PrivateKeyAccount,
  storage: InMemoryClientChannelStorage,
  sent: string[] = [],
): typeof fetch {
  const client = new x402Client();
  client.register(
    'eip155:*',
    new BatchSettlementEvmScheme(toClientEvmSigner(account, peers.evmChains[network]!.publicClient), { storage }),
  );
  const base = contractFetch();
  const noting: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const signature = request.headers.get('payment-signature');
    if (signature) sent.push(signature);
    return base(request);
  };
  return wrapFetchWithPayment(noting, client);
}

/** What our mirror of a channel clients pay us through says it has charged. */
export async function chargedOf(db: Db, channelId: string): Promise<bigint> {
  const row = await db
    .selectFrom('receiver_channels')
    .select('charged_cumulative')
    .where('channel_id', '=', channelId.toLowerCase())
    .executeTakeFirstOrThrow();
  return BigInt(row.charged_cumulative);
}

/** Reads until `done` holds (at most two minutes: the worker's claim and settle take blocks). */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Asks the worker to claim and settle what channels owe us now (the channel_claims job, forced or on its rules). */
export async function claimChannels(db: Db, force = true): Promise<void> {
  await sql`select graphile_worker.add_job('channel_claims', ${JSON.stringify({ force })}::json)`.execute(db);
}

/**
 * The service's settings for taking channels on `network` with a first deposit of at least
 * `multiplier` times the price; claims happen when the test asks (claimChannels) or for a
 * withdrawal, never on the threshold or the period.
 */
export function receiverChannelsEnv(network: EvmNetworkName, multiplier: bigint | number): Record<string, string> {
  return {
    CHANNEL_RECEIVER_NETWORKS: network,
    CHANNEL_RECEIVER_MIN_DEPOSIT_MULTIPLIER: String(multiplier),
    CHANNEL_RECEIVER_CLAIM_THRESHOLD_USDC: '1000',
    CHANNEL_RECEIVER_CLAIM_PERIOD_SECONDS: '604800',
  };
}
