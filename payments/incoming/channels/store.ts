/**
 * Our mirror of the channels clients pay us through, in Postgres (receiver_channels,
 * db/migrations/..._receiver_channels). Every change of a channel's row happens under its row lock:
 * a transaction around SELECT ... FOR UPDATE, or a single conditional UPDATE (the common request's
 * lease, charge and release, at the end of this file), so instances on one database see one order
 * of events per channel. A request is served under a lease (pending_id, pending_until) taken under
 * that lock: one request at a time per channel, in every instance; a charge is committed only by
 * the lease's holder, and its cumulative amount is unique per channel (receiver_channel_charges).
 */
import { sql, type RawBuilder } from 'kysely';
import type { Hex } from 'viem';
import type { Db, Tx } from '../../../db/index';
import { runPrepared } from '../../../db/prepared';
import { addSpendCall, giveBackQuery, type SpendMove } from '../../accounts/limits';
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

/** What a channel is read from: its row's columns that channelOf reads. */
const CHANNEL_COLUMN_NAMES = [
  'channel_id',
  'network',
  'config',
  'charged_cumulative',
  'signed_max_claimable',
  'signature',
  'balance',
  'total_claimed',
  'withdraw_requested_at',
  'refund_nonce',
  'onchain_synced_at',
  'pending_id',
  'pending_until',
  'last_request_at',
] as const;
type ChannelRow = Pick<NonNullable<Row>, (typeof CHANNEL_COLUMN_NAMES)[number]>;

function selectRow(db: Db | Tx, channelId: string) {
  return db.selectFrom('receiver_channels').selectAll().where('channel_id', '=', channelId).executeTakeFirst();
}

function channelOf(row: ChannelRow): StoredChannel {
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
 * path. A single statement locks its rows for its own duration: instances still see one order per
 * channel. The daily counters a request moves (payments/accounts/limits.ts) go in the same
 * statement, after the channel's row (the order every path takes: channel, then counters). Named
 * prepared statements (db/prepared.ts), so each returns its columns by name.
 */

/**
 * Commits its statement without waiting for the flush of its WAL: a lease and the counters moved
 * with it, and their release. A crash of the database may lose them as if the lease had expired
 * (counters are limits, not money); a charge, flushed, flushes everything written before it.
 */
const UNFLUSHED = sql`set_config('synchronous_commit', 'off', true)`;

/** The columns a channel is read with (channelOf). */
const CHANNEL_COLUMNS = sql.raw(CHANNEL_COLUMN_NAMES.map((name) => `c.${name}`).join(', '));

/**
 * The lease of a voucher that stands on the channel as stored: the channel's charged total plus
 * `increment` is the voucher's `ceiling`, within its balance and above what was claimed (and what
 * was claimed at most the charged total), the chain's state read since `freshSince`, and no live
 * lease holds it. With `spend`, its amount is added to its counters in the same statement, and the
 * lease taken only when every one admitted it (add_spend): `refusedBy` is then the position of the
 * first that refused, and nothing moved. Undefined when the channel does not stand so (nothing
 * moved either: the slow path decides).
 */
export async function leaseUnchanged(
  db: Db,
  channelId: Hex,
  lease: {
    ceiling: bigint;
    increment: bigint;
    freshSince: Date;
    pending: { id: string; until: Date };
    now: Date;
    spend?: { move: SpendMove; limits: readonly bigint[] };
  },
): Promise<{ leased: StoredChannel } | { refusedBy: number } | undefined> {
  const { ceiling, increment, freshSince, pending, now, spend } = lease;
  const stands = sql`c.channel_id = ${channelId.toLowerCase()}
      and c.charged_cumulative + ${increment.toString()}::numeric = ${ceiling.toString()}::numeric
      and c.total_claimed <= c.charged_cumulative
      and c.total_claimed < ${ceiling.toString()}::numeric
      and c.balance >= ${ceiling.toString()}::numeric
      and c.onchain_synced_at >= ${freshSince}
      and (c.pending_until is null or c.pending_until <= ${now})`;
  const set = sql`pending_id = ${pending.id}, pending_until = ${pending.until}, updated_at = ${now}`;
  if (!spend) {
    const { rows } = await runPrepared(
      db,
      sql<ChannelRow>`update receiver_channels c set ${set} from (select ${UNFLUSHED}) as unflushed
        where ${stands} returning ${CHANNEL_COLUMNS}`.compile(db),
    );
    const row = rows[0];
    return row ? { leased: channelOf(row) } : undefined;
  }
  // The row locked first (as the UPDATE would), the counters moved only for a channel that stands,
  // the lease taken only when they moved.
  const { rows } = await runPrepared(
    db,
    sql<Omit<ChannelRow, 'channel_id'> & { channel_id: string | null; refused: number | null }>`
      with standing as (
        select c.channel_id, ${UNFLUSHED} as unflushed from receiver_channels c where ${stands} for update
      ), spend as (
        select ${addSpendCall(spend.move, spend.limits)} as refused from standing
      ), leased as (
        update receiver_channels c set ${set}
          from spend where c.channel_id = ${channelId.toLowerCase()} and spend.refused is null
          returning ${CHANNEL_COLUMNS}
      )
      select spend.refused, leased.* from spend left join leased on true`.compile(db),
  );
  const row = rows[0];
  if (!row) return undefined;
  if (row.refused !== null) return { refusedBy: row.refused };
  const { channel_id: leasedId, ...leased } = row;
  // Admitted by the counters, the row that stood is leased: it was locked for this statement.
  if (leasedId === null) throw new Error(`channel ${channelId} was not leased after its counters admitted it`);
  return { leased: channelOf({ ...leased, channel_id: leasedId }) };
}

/** A charge under a lease: its amount, the voucher it stands on, what it paid for, the counters it gives back. */
export interface LeaseCharge {
  pendingId: string;
  amount: bigint;
  voucher: { maxClaimableAmount: bigint; signature: Hex };
  targetUrl?: string;
  giveBack?: SpendMove;
}

/**
 * The lease holder's charge of `amount` under the voucher it was given, with the charge's row: the
 * channel as charged, or undefined when the lease is no longer held or the voucher does not cover
 * it (the slow path says which; nothing moved). A cumulative amount already committed fails, as
 * insertCharge does. `giveBack` is taken off its counters in the same statement, only when charged.
 */
export async function chargeUnderLease(
  db: Db,
  channelId: Hex,
  charge: LeaseCharge,
): Promise<StoredChannel | undefined> {
  const parts = chargeUnderLeaseParts(channelId, charge);
  const { rows } = await runPrepared(
    db,
    sql<Record<string, unknown>>`with ${parts.ctes} select ${parts.columns}`.compile(db),
  );
  return leaseChargedOf(rows[0] ?? {});
}

/**
 * chargeUnderLease's writes as parts of a statement, its own or another room's (the record of our
 * own voucher's answer, payments/outgoing/channels.ts, commits a relay client's charge with it):
 * its common table expressions, and the columns it reads back, one row whatever happened
 * (`lease_` and the channel's column names, all null when nothing was charged; leaseChargedOf).
 */
export function chargeUnderLeaseParts(
  channelId: Hex,
  charge: LeaseCharge,
): { ctes: RawBuilder<unknown>; columns: RawBuilder<unknown> } {
  const id = channelId.toLowerCase();
  const now = new Date();
  const max = charge.voucher.maxClaimableAmount.toString();
  const amount = charge.amount.toString();
  const given = givenBack(charge.giveBack, 'charged');
  return {
    ctes: sql`charged as (
        update receiver_channels c set
            charged_cumulative = c.charged_cumulative + ${amount}::numeric,
            signed_max_claimable = ${max}::numeric,
            signature = ${charge.voucher.signature},
            pending_id = null,
            pending_until = null,
            last_request_at = ${now},
            updated_at = ${now}
          where c.channel_id = ${id} and c.pending_id = ${charge.pendingId}
            and c.charged_cumulative + ${amount}::numeric <= ${max}::numeric
          returning ${CHANNEL_COLUMNS}
      ), recorded as (
        insert into receiver_channel_charges (channel_id, cumulative, amount, signed_max_claimable, target_url)
          select charged.channel_id, charged.charged_cumulative, ${amount}::numeric, ${max}::numeric,
                 ${charge.targetUrl ?? null}::text
            from charged
      )${given.cte}`,
    columns: sql`${sql.join(
      CHANNEL_COLUMN_NAMES.map((name) => sql`(select ${sql.ref(name)} from charged) as ${sql.ref(`lease_${name}`)}`),
    )}${given.read}`,
  };
}

/** The channel as chargeUnderLeaseParts' columns read it back, or undefined when nothing was charged. */
export function leaseChargedOf(row: Record<string, unknown>): StoredChannel | undefined {
  if (row.lease_channel_id === null || row.lease_channel_id === undefined) return undefined;
  return channelOf(Object.fromEntries(CHANNEL_COLUMN_NAMES.map((name) => [name, row[`lease_${name}`]])) as ChannelRow);
}

/**
 * The lease holder's end of a request charged nothing (the resource answered, its price was
 * nothing): the lease ends, the voucher pays the next request. The channel as it stands after, or
 * undefined when the lease is no longer held (nothing moved). `giveBack` as chargeUnderLease's.
 */
export async function closeLeaseUncharged(
  db: Db,
  channelId: Hex,
  pendingId: string,
  giveBack?: SpendMove,
): Promise<StoredChannel | undefined> {
  const now = new Date();
  const given = givenBack(giveBack, 'closed');
  const { rows } = await runPrepared(
    db,
    sql<ChannelRow>`
      with closed as (
        update receiver_channels c set pending_id = null, pending_until = null, last_request_at = ${now}, updated_at = ${now}
          where c.channel_id = ${channelId.toLowerCase()} and c.pending_id = ${pendingId}
          returning ${CHANNEL_COLUMNS}
      )${given.cte}
      select closed.*${given.read} from closed`.compile(db),
  );
  const row = rows[0];
  return row ? channelOf(row) : undefined;
}

/**
 * Ends the lease `pendingId` holds, if it still holds it; `giveBack` is taken off its counters in
 * the same statement whether or not it still held the lease (what the request added, it gives back).
 */
export async function endLease(db: Db, channelId: Hex, pendingId: string, giveBack?: SpendMove): Promise<void> {
  const now = new Date();
  const ending = sql`update receiver_channels c set pending_id = null, pending_until = null, updated_at = ${now}
    from (select ${UNFLUSHED}) as unflushed where c.channel_id = ${channelId.toLowerCase()} and c.pending_id = ${pendingId}`;
  if (giveBack === undefined || giveBack.amount <= 0n || giveBack.keys.length === 0) {
    await runPrepared(db, ending.compile(db));
    return;
  }
  await runPrepared(
    db,
    sql`with ended as (${ending}), given as (${giveBackQuery(giveBack)})
      select count(*) as given from given`.compile(db),
  );
}

/**
 * The CTE giving `move` back after `after` (a CTE of one row or none) and the column that reads it
 * (a SELECT in a WITH runs only when read); nothing when there is nothing to give back.
 */
function givenBack(
  move: SpendMove | undefined,
  after: string,
): { cte: RawBuilder<unknown>; read: RawBuilder<unknown> } {
  if (move === undefined || move.amount <= 0n || move.keys.length === 0) return { cte: sql``, read: sql`` };
  return {
    cte: sql`, given as (${giveBackQuery(move, sql.table(after))})`,
    read: sql`, (select count(*) from given) as given`,
  };
}
