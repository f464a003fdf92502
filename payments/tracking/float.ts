/**
 * Our float: what the service wallet holds on each enabled network, in the network's stablecoin
 * (what it pays targets and refunds with) and in its gas token (what settling and refunding cost).
 *
 * A job (worker/tasks/floatRefresh.ts, every FLOAT_REFRESH_SECONDS and once at each worker's start)
 * reads every network through its chain family (ChainFamily.walletHoldings) and writes the reading
 * to wallet_floats. Every process reads that table, never the chain, for the gauges of /metrics and
 * for the floors of /relay and /proxy (floorCheck.ts): through a FloatView, which reads the table at
 * most once per FLOAT_VIEW_MS. A read that fails keeps the last figures and records its error.
 *
 * Beside the float: what the service owes back (relay refunds not yet confirmed) and what is held
 * in payment channels, for the operator's `npm run admin -- float`.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/index';
import { GAS_DECIMALS, type Config, type WalletFloor } from '../basics/config';
import { assetToMicro, microToAsset, parseUsdc } from '../basics/money';
import { NETWORK_TABLE, type NetworkName } from '../basics/networkTable';
import { familyOf } from '../chains/registry';
import type { Deps } from '../deps';
import { addJob } from '../basics/jobs';

/** One network's reading as stored: atomic units of the stablecoin, and wei or lamports. */
export interface FloatReading {
  network: NetworkName;
  wallet: string;
  asset: bigint;
  gas: bigint;
  readAt: Date;
  /** The last read that failed since (the figures are then the older reading's), and when. */
  error: string | null;
  errorAt: Date | null;
}

/** A network's floors in atomic units: of its stablecoin, and of its gas token; and as configured. */
export interface AtomicFloor {
  asset: bigint;
  gas: bigint;
  configured: WalletFloor;
}

/** Whole units (decimal text) in atomic units of a token with `decimals` decimals. */
export function parseAtomic(text: string, decimals: number): bigint {
  const [whole = '0', fraction = ''] = text.split('.');
  return BigInt(whole) * 10n ** BigInt(decimals) + BigInt(fraction.padEnd(decimals, '0').slice(0, decimals) || '0');
}

/** Atomic units as whole units (decimal text, trailing zeros dropped). */
export function formatAtomic(amount: bigint, decimals: number): string {
  const scale = 10n ** BigInt(decimals);
  const sign = amount < 0n ? '-' : '';
  const magnitude = amount < 0n ? -amount : amount;
  const fraction = (magnitude % scale).toString().padStart(decimals, '0').replace(/0+$/, '');
  return `${sign}${magnitude / scale}${fraction ? `.${fraction}` : ''}`;
}

/** The floors configured for a network (config.walletFloors), in atomic units; undefined when it is not enabled. */
export function floorOf(config: Pick<Config, 'walletFloors'>, network: NetworkName): AtomicFloor | undefined {
  const floor = config.walletFloors[network];
  if (!floor) return undefined;
  const { decimals, chainType } = NETWORK_TABLE[network];
  return {
    asset: microToAsset(parseUsdc(floor.assetUsdc), decimals),
    gas: parseAtomic(floor.gas, GAS_DECIMALS[chainType]),
    configured: floor,
  };
}

/** The name of a family's gas token, in messages. */
export function gasSymbol(network: NetworkName): string {
  return familyOf(network).gasToken;
}

/** The stablecoin in micro-USDC (it counts 1:1 with USDC whatever its decimals). */
export function assetMicroUsdc(network: NetworkName, asset: bigint): bigint {
  return assetToMicro(asset, NETWORK_TABLE[network].decimals);
}

export type FloatRead =
  | { network: NetworkName; kind: 'read'; reading: FloatReading }
  | { network: NetworkName; kind: 'failed'; details: string }
  /** Our key for this network's family is not configured: nothing to read. */
  | { network: NetworkName; kind: 'no_wallet' };

/**
 * Reads our holdings on every enabled network from its chain now, and stores each reading (or the
 * error of a read that failed, beside the last figures). One network's failure does not stop the others.
 */
export async function refreshWalletFloats(deps: Pick<Deps, 'db' | 'chains' | 'config' | 'log'>): Promise<FloatRead[]> {
  return Promise.all(
    deps.config.networks.map(async ({ name: network }): Promise<FloatRead> => {
      const family = familyOf(network);
      const wallet = family.serviceAddress(deps.chains);
      if (wallet === undefined) return { network, kind: 'no_wallet' };
      const held = await family.walletHoldings(deps.chains, network).catch((error: unknown) => ({
        ok: false as const,
        reason: 'read_failed',
        details: error instanceof Error ? error.message : String(error),
      }));
      if (!held.ok) {
        const details = `${held.reason}: ${held.details}`.slice(0, 1000);
        await sql`
          update wallet_floats set error = ${details}, error_at = now() where network = ${network}
        `.execute(deps.db);
        deps.log.warn({ network, reason: held.reason }, `our balances on ${network} could not be read: ${details}`);
        return { network, kind: 'failed', details };
      }
      if (held.value === undefined) return { network, kind: 'no_wallet' };
      const { asset, gas } = held.value;
      const stored = await sql<{ read_at: Date }>`
        insert into wallet_floats (network, wallet, asset_atomic, gas_atomic, read_at, error, error_at)
        values (${network}, ${wallet}, ${asset.toString()}::numeric, ${gas.toString()}::numeric, now(), null, null)
        on conflict (network) do update set
          wallet = excluded.wallet, asset_atomic = excluded.asset_atomic, gas_atomic = excluded.gas_atomic,
          read_at = excluded.read_at, error = null, error_at = null
        returning read_at
      `.execute(deps.db);
      const readAt = stored.rows[0]?.read_at ?? new Date();
      return { network, kind: 'read', reading: { network, wallet, asset, gas, readAt, error: null, errorAt: null } };
    }),
  );
}

/**
 * Queues the float job `afterSeconds` from now: one job whatever the number of workers (its key),
 * each run queuing the next. Every worker queues one at its start (afterSeconds 0): the first
 * reading comes at once, and a chain of runs broken by a crash starts again with the next worker.
 */
export async function queueFloatRefresh(db: Db, afterSeconds: number, nowMs = Date.now()): Promise<void> {
  await addJob(db, {
    task: 'float_refresh',
    payload: {},
    key: 'float_refresh',
    runAt: new Date(nowMs + afterSeconds * 1000),
    maxAttempts: 1,
  });
}

/** Every stored reading, by network (networks never read are absent). */
export async function storedFloats(db: Db): Promise<Map<NetworkName, FloatReading>> {
  const { rows } = await sql<{
    network: NetworkName;
    wallet: string;
    asset: string;
    gas: string;
    read_at: Date;
    error: string | null;
    error_at: Date | null;
  }>`
    select network, wallet, asset_atomic::text as asset, gas_atomic::text as gas, read_at, error, error_at
    from wallet_floats
  `.execute(db);
  return new Map(
    rows.map((row) => [
      row.network,
      {
        network: row.network,
        wallet: row.wallet,
        asset: BigInt(row.asset),
        gas: BigInt(row.gas),
        readAt: row.read_at,
        error: row.error,
        errorAt: row.error_at,
      },
    ]),
  );
}

/** A FloatView reads wallet_floats at most this often. */
export const FLOAT_VIEW_MS = 1_000;

/**
 * The stored readings as one process sees them: read from the table at most once per
 * FLOAT_VIEW_MS, shared by every request (concurrent callers wait for the same read). A table that
 * cannot be read keeps the last view.
 */
export class FloatView {
  private view: Map<NetworkName, FloatReading> = new Map();
  private readAtMs = Number.NEGATIVE_INFINITY;
  private reading: Promise<Map<NetworkName, FloatReading>> | undefined;

  constructor(
    private readonly db: Db,
    private readonly maxAgeMs = FLOAT_VIEW_MS,
  ) {}

  async current(nowMs = Date.now()): Promise<Map<NetworkName, FloatReading>> {
    if (nowMs - this.readAtMs < this.maxAgeMs && nowMs >= this.readAtMs) return this.view;
    this.reading ??= storedFloats(this.db)
      .then((view) => {
        this.view = view;
        this.readAtMs = Date.now();
        return view;
      })
      .catch(() => this.view)
      .finally(() => {
        this.reading = undefined;
      });
    return this.reading;
  }
}

const VIEWS = new WeakMap<Db, FloatView>();

/** The FloatView of a database handle: one per process and database, made on first use. */
export function floatViewOf(db: Db): FloatView {
  let view = VIEWS.get(db);
  if (!view) {
    view = new FloatView(db);
    VIEWS.set(db, view);
  }
  return view;
}

/** What the service owes back on a network: relay refunds decided and not confirmed, in micro-USDC. */
export interface OwedRefunds {
  pendingCount: number;
  pendingMicroUsdc: bigint;
  /** Refunds that failed for good and wait for an operator. */
  failedCount: number;
  failedMicroUsdc: bigint;
}

export async function owedRefunds(db: Db): Promise<Map<string, OwedRefunds>> {
  const { rows } = await sql<{ network: string; state: string; count: string; micro: string }>`
    select network, state, count(*)::text as count, coalesce(sum(coalesce(refund_micro, amount_micro)), 0)::text as micro
    from relay_transactions
    where state in ('refund_pending', 'refund_failed')
    group by network, state
  `.execute(db);
  const owed = new Map<string, OwedRefunds>();
  for (const row of rows) {
    const entry = owed.get(row.network) ?? {
      pendingCount: 0,
      pendingMicroUsdc: 0n,
      failedCount: 0,
      failedMicroUsdc: 0n,
    };
    if (row.state === 'refund_pending') {
      entry.pendingCount += Number(row.count);
      entry.pendingMicroUsdc += BigInt(row.micro);
    } else {
      entry.failedCount += Number(row.count);
      entry.failedMicroUsdc += BigInt(row.micro);
    }
    owed.set(row.network, entry);
  }
  return owed;
}

/**
 * Money of ours held in payment channels on each network, in micro-USDC: what our deposits into
 * our batch-settlement channels (payer_channels, payments/outgoing/channels.ts) hold that sellers
 * have not charged yet, as last known (the chain's balance, less the charges sellers reported).
 * It is ours until a seller charges it, and comes back by a cooperative refund or a withdrawal.
 */
export const heldInChannels: {
  read: (db: Db) => Promise<Map<string, bigint>>;
  /** Whether channel funds are tracked (always, since payer channels exist). */
  installed: boolean;
} = {
  read: async (db) => {
    const rows = await db
      .selectFrom('payer_channels')
      .select((eb) => ['network', eb.fn.sum<string>(sql`greatest(balance_atomic - charged_atomic, 0)`).as('held')])
      .where('state', '!=', 'closed')
      .groupBy('network')
      .execute();
    const held = new Map<string, bigint>();
    for (const row of rows) {
      const network = row.network as NetworkName;
      if (!(network in NETWORK_TABLE)) continue;
      held.set(network, assetToMicro(BigInt(row.held), NETWORK_TABLE[network].decimals));
    }
    return held;
  },
  installed: true,
};

/**
 * The nearest claim deadline per network, unix seconds: on the channels we are paid through whose
 * payer started a withdrawal (receiver_channels.withdraw_requested_at) while charges are unclaimed,
 * the end of that withdrawal's delay. The channel_claims job claims before it; the alert
 * ClaimDeadlineNear fires when it comes within the hour.
 */
export async function claimDeadlines(db: Db): Promise<Map<string, number>> {
  const rows = await db
    .selectFrom('receiver_channels')
    .select((eb) => ['network', eb.fn.min<string>(sql`withdraw_requested_at + withdraw_delay`).as('deadline')])
    .where('withdraw_requested_at', '>', 0n)
    .where(sql<boolean>`charged_cumulative > total_claimed`)
    .groupBy('network')
    .execute();
  return new Map(rows.map((row) => [row.network, Number(row.deadline)]));
}
