/**
 * Our mirror of the channels clients pay us through, in Postgres (receiver_channels,
 * db/migrations/..._receiver_channels). Every change of a channel's row happens under its row lock:
 * a transaction around SELECT ... FOR UPDATE, or a single conditional UPDATE (the common request's
 * lease, charge and release, at the end of this file), so instances on one database see one order
 * of events per channel. A request is served under a lease (pending_id, pending_until) taken under
 * that lock: one request at a time per channel, in every instance; a charge is committed only by
 * the lease's holder, and its cumulative amount is unique per channel (receiver_channel_charges).
 */
import { sql } from 'kysely';
import type { Hex } from 'viem';
import type { Db, Tx } from '../../../db/index';
import type { ChannelConfig } from '../../chains/evm/batchSettlement/voucher';
import type { OnchainChannel } from '../../chains/evm/batchSettlement/receiverChain';

/** A channel as we mirror it; amounts in token atomic units. */
export interface StoredChannel {
  channelId: Hex;
  network: string;
  config: ChannelConfig;
  chargedCumulative: bigint;
  signedMaxClaimable: bigint;
  signature: Hex | undefined;
  balance: bigint;
  totalClaimed: bigint;
  /** Unix seconds; 0 when no withdrawal is pending. */
  withdrawRequestedAt: number;
  refundNonce: bigint;
  onchainSyncedAt: Date | undefined;
  pendingId: string | undefined;
  pendingUntil: Date | undefined;
  lastRequestAt: Date | undefined;
}

type Row = Awaited<ReturnType<typeof selectRow>>;

function selectRow(db: Db | Tx, channelId: string) {
  return db.selectFrom('receiver_channels').selectAll().where('channel_id', '=', channelId).executeTakeFirst();
}

function channelOf(row: NonNullable<Row>): StoredChannel {
  return {
    channelId: row.channel_id as Hex,
    network: row.network,
    config: row.config as ChannelConfig,
    chargedCumulative: BigInt(row.charged_cumulative),
    signedMaxClaimable: BigInt(row.signed_max_claimable),
    signature: (row.signature ?? undefined) as Hex | undefined,
    balance: BigInt(row.balance),
    totalClaimed: BigInt(row.total_claimed),
    withdrawRequestedAt: Number(row.withdraw_requested_at),
    refundNonce: row.refund_nonce,
    onchainSyncedAt: row.onchain_synced_at ?? undefined,
    pendingId: row.pending_id ?? undefined,
    pendingUntil: row.pending_until ?? undefined,
    lastRequestAt: row.last_request_at ?? undefined,
  };
}

export async function findChannel(db: Db | Tx, channelId: Hex): Promise<StoredChannel | undefined> {
  const row = await selectRow(db, channelId.toLowerCase());
  return row ? channelOf(row) : undefined;
}

async function lockRow(tx: Tx, channelId: string): Promise<StoredChannel | undefined> {
  const row = await tx
    .selectFrom('receiver_channels')
    .selectAll()
    .where('channel_id', '=', channelId)
    .forUpdate()
    .executeTakeFirst();
  return row ? channelOf(row) : undefined;
}

/**
 * Atomic read-modify-write of one channel across instances: `update` sees the row under its lock
 * (undefined when there is none) and returns its decision; `write` columns are stored with it.
 */
export async function updateChannel<T>(
  db: Db,
  channelId: Hex,
  update: (
    current: StoredChannel | undefined,
    tx: Tx,
  ) => Promise<{ result: T; write?: ChannelWrite }> | { result: T; write?: ChannelWrite },
): Promise<T> {
  const id = channelId.toLowerCase();
  return db.transaction().execute(async (tx) => {
    const current = await lockRow(tx, id);
    const { result, write } = await update(current, tx);
    if (write) await writeChannel(tx, id, current, write);
    return result;
  });
}

/** Columns of a channel row to write; a missing row is created from `network` and `config`. */
export interface ChannelWrite {
  network?: string;
  config?: ChannelConfig;
  chargedCumulative?: bigint;
  signedMaxClaimable?: bigint;
  signature?: Hex | null;
  onchain?: OnchainChannel;
  pending?: { id: string; until: Date } | null;
  lastRequestAt?: Date;
}

const claimDueOf = (withdrawRequestedAt: number) =>
  // A pending withdrawal: the claim is due at once (the worker looks for it).
  withdrawRequestedAt > 0 ? new Date() : null;

async function writeChannel(
  tx: Tx,
  id: string,
  current: StoredChannel | undefined,
  write: ChannelWrite,
): Promise<void> {
  const columns = {
    ...(write.chargedCumulative === undefined ? {} : { charged_cumulative: write.chargedCumulative }),
    ...(write.signedMaxClaimable === undefined ? {} : { signed_max_claimable: write.signedMaxClaimable }),
    ...(write.signature === undefined ? {} : { signature: write.signature }),
    ...(write.onchain === undefined
      ? {}
      : {
          balance: write.onchain.balance,
          total_claimed: write.onchain.totalClaimed,
          withdraw_requested_at: BigInt(write.onchain.withdrawRequestedAt),
          refund_nonce: write.onchain.refundNonce,
          onchain_synced_at: new Date(),
          claim_due_at: claimDueOf(write.onchain.withdrawRequestedAt),
        }),
    ...(write.pending === undefined
      ? {}
      : { pending_id: write.pending?.id ?? null, pending_until: write.pending?.until ?? null }),
    ...(write.lastRequestAt === undefined ? {} : { last_request_at: write.lastRequestAt }),
    updated_at: new Date(),
  };
  if (current) {
    await tx.updateTable('receiver_channels').set(columns).where('channel_id', '=', id).execute();
    return;
  }
  const { config, network } = write;
  if (!config || !network) throw new Error(`channel ${id} has no row and no config to create one`);
  await tx
    .insertInto('receiver_channels')
    .values({
      channel_id: id,
      network,
      payer: config.payer.toLowerCase(),
      payer_authorizer: config.payerAuthorizer.toLowerCase(),
      receiver: config.receiver.toLowerCase(),
      token: config.token.toLowerCase(),
      withdraw_delay: config.withdrawDelay,
      config: JSON.stringify(config),
      ...columns,
    })
    .execute();
}

/** Records a committed charge: fails (a unique violation) if this cumulative amount was ever committed on the channel. */
export async function insertCharge(
  tx: Tx,
  charge: { channelId: Hex; cumulative: bigint; amount: bigint; signedMaxClaimable: bigint; targetUrl?: string },
): Promise<void> {
  await tx
    .insertInto('receiver_channel_charges')
    .values({
      channel_id: charge.channelId.toLowerCase(),
      cumulative: charge.cumulative,
      amount: charge.amount,
      signed_max_claimable: charge.signedMaxClaimable,
      target_url: charge.targetUrl ?? null,
    })
    .execute();
}

/** Channels on a network with charges not yet claimed (oldest request first), or with a pending withdrawal. */
export async function channelsToWatch(db: Db, network: string, limit: number): Promise<StoredChannel[]> {
  const rows = await db
    .selectFrom('receiver_channels')
    .selectAll()
    .where('network', '=', network)
    .where((eb) => eb.or([eb('charged_cumulative', '>', eb.ref('total_claimed')), eb('claim_due_at', 'is not', null)]))
    .orderBy('last_request_at', 'asc')
    .limit(limit)
    .execute();
  return rows.map(channelOf);
}

/** Networks with at least one channel row. */
export async function channelNetworks(db: Db): Promise<string[]> {
  const rows = await db.selectFrom('receiver_channels').select('network').distinct().execute();
  return rows.map((row) => row.network);
}

/** Stores the mirrored chain state of a channel (under its lock); claimed totals only ever grow. */
export async function storeOnchain(db: Db, channelId: Hex, onchain: OnchainChannel): Promise<void> {
  await updateChannel(db, channelId, (current) => ({
    result: undefined,
    ...(current ? { write: { onchain } } : {}),
  }));
}

/** Records one of our claim, settle or refund transactions (before its broadcast). */
export async function recordReceiverTransaction(
  db: Db,
  entry: { network: string; kind: 'claim' | 'settle' | 'refund'; txHash: string; channels: number; amount: bigint },
): Promise<bigint> {
  const row = await db
    .insertInto('receiver_channel_claims')
    .values({
      network: entry.network,
      kind: entry.kind,
      tx_hash: entry.txHash,
      channels: entry.channels,
      amount: entry.amount,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function markReceiverTransaction(
  db: Db,
  txHash: string,
  state: 'confirmed' | 'failed',
  details?: string,
): Promise<void> {
  await db
    .updateTable('receiver_channel_claims')
    .set({ state, ...(details === undefined ? {} : { details }) })
    .where('tx_hash', '=', txHash)
    .execute();
}

/** Runs `work` holding the claim lock of a network (one claimer at a time across instances); undefined when another holds it. */
export async function withNetworkClaimLock<T>(db: Db, network: string, work: () => Promise<T>): Promise<T | undefined> {
  return db.transaction().execute(async (tx) => {
    const { rows } = await sql<{ locked: boolean }>`
      select pg_try_advisory_xact_lock(hashtextextended(${'channel-claims:' + network}, 0)) as locked`.execute(tx);
    if (!rows[0]?.locked) return undefined;
    return work();
  });
}

/*
 * One-statement paths for a request on a channel that stands as we last read it: the lease, the
 * charge and the release, each one round trip instead of a transaction around a row lock. Each is
 * conditional on the row as the slow path would have found it under its lock, so either it does
 * exactly what the slow path would, or it changes nothing (undefined) and the caller takes the slow
 * path. A single UPDATE locks its row for its own duration: instances still see one order per channel.
 */

/**
 * The lease, when the channel's charged total is still `charged` (at least what was claimed) and no
 * live lease holds it: the row as leased, or undefined (the slow path decides).
 */
export async function leaseUnchanged(
  db: Db,
  channelId: Hex,
  { charged, pending, now }: { charged: bigint; pending: { id: string; until: Date }; now: Date },
): Promise<StoredChannel | undefined> {
  const row = await db
    .updateTable('receiver_channels')
    .set({ pending_id: pending.id, pending_until: pending.until, updated_at: now })
    .where('channel_id', '=', channelId.toLowerCase())
    .where('charged_cumulative', '=', charged.toString())
    .where('total_claimed', '<=', charged.toString())
    .where((eb) => eb.or([eb('pending_until', 'is', null), eb('pending_until', '<=', now)]))
    .returningAll()
    .executeTakeFirst();
  return row ? channelOf(row) : undefined;
}

/**
 * The lease holder's charge of `amount` under the voucher it was given, with the charge's row: the
 * channel as charged, or undefined when the lease is no longer held or the voucher does not cover
 * it (the slow path says which). A cumulative amount already committed fails, as insertCharge does.
 */
export async function chargeUnderLease(
  db: Db,
  channelId: Hex,
  charge: {
    pendingId: string;
    amount: bigint;
    voucher: { maxClaimableAmount: bigint; signature: Hex };
    targetUrl?: string;
  },
): Promise<StoredChannel | undefined> {
  const id = channelId.toLowerCase();
  const now = new Date();
  const max = charge.voucher.maxClaimableAmount;
  const row = await db
    .with('charged', (qb) =>
      qb
        .updateTable('receiver_channels')
        .set({
          charged_cumulative: sql`charged_cumulative + ${charge.amount}::numeric`,
          signed_max_claimable: max,
          signature: charge.voucher.signature,
          pending_id: null,
          pending_until: null,
          last_request_at: now,
          updated_at: now,
        })
        .where('channel_id', '=', id)
        .where('pending_id', '=', charge.pendingId)
        .where(sql<boolean>`charged_cumulative + ${charge.amount}::numeric <= ${max}::numeric`)
        .returningAll(),
    )
    .with('recorded', (qb) =>
      qb
        .insertInto('receiver_channel_charges')
        .columns(['channel_id', 'cumulative', 'amount', 'signed_max_claimable', 'target_url'])
        .expression((eb) =>
          eb
            .selectFrom('charged')
            .select([
              'charged.channel_id',
              'charged.charged_cumulative',
              sql<string>`${charge.amount}::numeric`.as('amount'),
              sql<string>`${max}::numeric`.as('signed_max_claimable'),
              sql<string | null>`${charge.targetUrl ?? null}::text`.as('target_url'),
            ]),
        ),
    )
    .selectFrom('charged')
    .selectAll()
    .executeTakeFirst();
  return row ? channelOf(row) : undefined;
}

/** Ends the lease `pendingId` holds, if it still holds it. */
export async function endLease(db: Db, channelId: Hex, pendingId: string): Promise<void> {
  await db
    .updateTable('receiver_channels')
    .set({ pending_id: null, pending_until: null, updated_at: new Date() })
    .where('channel_id', '=', channelId.toLowerCase())
    .where('pending_id', '=', pendingId)
    .execute();
}
