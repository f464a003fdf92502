/**
 * Daily spend counters (docs/architecture.md section 3). A counter is increased only when the
 * result stays within its limit, in one statement, so concurrent calls can never overshoot: the
 * database function add_spend (db/functions/add_spend.sql), which moves the counters of one call
 * together for reserve_credits, admit_relay_payment and a channel payment's lease
 * (payments/incoming/channels/store.ts, addSpendCall). Relay counters are in micro-USDC
 * (daily_spend.spent_micro_usdc); proxy and API key counters are in credits
 * (daily_spend.spent_credits). The day is the UTC date.
 */
import { sql, type RawBuilder } from 'kysely';
import type { Db, Tx } from '../../db/index';
import type { SpendClass, SpendScope } from '../../db/schema';
import { addDays } from '../basics/clock';
import { MICRO_PER_CREDIT } from '../basics/money';

export interface SpendKey {
  scope: SpendScope;
  scopeId: string;
  networkClass: SpendClass;
  day: string;
}

export const SYSTEM_SCOPE_ID = 'system';

/**
 * The column that holds a scope's counter, named for its unit; the other stays zero (the check
 * daily_spend_one_unit, and the same rule in db/functions/add_spend.sql and subtract_spend.sql).
 */
export const SPEND_COLUMN = {
  relay_wallet: 'spent_micro_usdc',
  relay_system: 'spent_micro_usdc',
  proxy_account: 'spent_credits',
  proxy_system: 'spent_credits',
  api_key: 'spent_credits',
} as const satisfies Record<SpendScope, 'spent_micro_usdc' | 'spent_credits'>;

/** The counter of `key` in its scope's unit (SPEND_COLUMN). */
export async function spentOn(db: Db | Tx, key: SpendKey): Promise<bigint> {
  const column = SPEND_COLUMN[key.scope];
  const row = await db
    .selectFrom('daily_spend')
    .select(column)
    .where('scope', '=', key.scope)
    .where('scope_id', '=', key.scopeId)
    .where('network_class', '=', key.networkClass)
    .where('day', '=', key.day)
    .executeTakeFirst();
  return row?.[column] ?? 0n;
}

/** Takes back an amount added earlier (a released reservation); never below zero. */
export async function subtractSpend(tx: Db | Tx, key: SpendKey, amount: bigint): Promise<void> {
  await sql`
    select subtract_spend(${key.scope}::text, ${key.scopeId}::text, ${key.networkClass}::text, ${key.day}::date, ${amount}::bigint)`.execute(
    tx,
  );
}

/**
 * One call's amount on several counters, in the callers' lock order (the payer's before the
 * service's), in their scopes' unit: what add_spend adds together, or what was added and is given back.
 */
export interface SpendMove {
  keys: readonly SpendKey[];
  amount: bigint;
}

/**
 * The call `add_spend(...)` for `move` (each counter within its own limit, `limits` in the order of
 * its keys): an SQL expression for a caller's own statement, valued as add_spend is (null when every
 * counter moved, else the 1-based position of the first that refused, and nothing moved). Its keys
 * share one day.
 */
export function addSpendCall(move: SpendMove, limits: readonly bigint[]): RawBuilder<number | null> {
  const [first] = move.keys;
  if (!first || limits.length !== move.keys.length) throw new RangeError('add_spend takes one limit per counter');
  return sql<number | null>`add_spend(
    ${move.keys.map((key) => key.scope)}::text[], ${move.keys.map((key) => key.scopeId)}::text[],
    ${move.keys.map((key) => key.networkClass)}::text[], ${limits.map(String)}::bigint[],
    ${first.day}::date, ${move.amount}::bigint)`;
}

/**
 * A query giving `move` back to its counters (subtract_spend on each, in its keys' order, never
 * below zero), one row per counter; `from` adds a relation to its FROM (a CTE's name), so that
 * nothing is given back when that relation has no row. A SELECT: inside a WITH it runs only when
 * read.
 */
export function giveBackQuery(move: SpendMove, from?: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`select subtract_spend(k.scope, k.scope_id, k.network_class, k.day, ${move.amount}::bigint) as given
    from ${from === undefined ? sql`` : sql`${from}, `}unnest(
      ${move.keys.map((key) => key.scope)}::text[], ${move.keys.map((key) => key.scopeId)}::text[],
      ${move.keys.map((key) => key.networkClass)}::text[], ${move.keys.map((key) => key.day)}::date[]
    ) as k(scope, scope_id, network_class, day)`;
}

/** Gives `move` back to its counters in one statement (never below zero); nothing when its amount is zero. */
export async function giveBackSpend(db: Db | Tx, move: SpendMove): Promise<void> {
  if (move.amount <= 0n || move.keys.length === 0) return;
  await giveBackQuery(move).execute(db);
}

/** Spend rows are kept this many days for operators, then pruned by the daily job. */
export const SPEND_RETENTION_DAYS = 35;

/** Opens the new day's system counters at zero and prunes counters past retention. */
export async function startDay(db: Db, day: string): Promise<{ prunedRows: number }> {
  return db.transaction().execute(async (tx) => {
    for (const scope of ['relay_system', 'proxy_system'] as const) {
      for (const networkClass of ['mainnet', 'testnet'] as const) {
        await tx
          .insertInto('daily_spend')
          .values({
            scope,
            scope_id: SYSTEM_SCOPE_ID,
            network_class: networkClass,
            day,
            spent_micro_usdc: 0n,
            spent_credits: 0n,
          })
          .onConflict((conflict) => conflict.doNothing())
          .execute();
      }
    }
    const pruned = await tx
      .deleteFrom('daily_spend')
      .where('day', '<', addDays(day, -SPEND_RETENTION_DAYS))
      .executeTakeFirst();
    return { prunedRows: Number(pruned.numDeletedRows) };
  });
}

export interface VolumeFigures {
  limitMicro: bigint;
  spentMicro: bigint;
}

/** System-wide volume of relay and proxy today, per network class, in micro-USDC. */
export async function systemVolumes(
  db: Db,
  day: string,
  limits: { relayTotalMicro: bigint; proxyTotalMicro: bigint },
): Promise<Record<'relay' | 'proxy', Record<'mainnet' | 'testnet', VolumeFigures>>> {
  const rows = await db
    .selectFrom('daily_spend')
    .select(['scope', 'network_class', 'spent_micro_usdc', 'spent_credits'])
    .where('scope', 'in', ['relay_system', 'proxy_system'])
    .where('scope_id', '=', SYSTEM_SCOPE_ID)
    .where('day', '=', day)
    .execute();
  const row = (scope: SpendScope, networkClass: SpendClass) =>
    rows.find((found) => found.scope === scope && found.network_class === networkClass);
  const relayMicro = (networkClass: SpendClass) => row('relay_system', networkClass)?.spent_micro_usdc ?? 0n;
  const proxyCredits = (networkClass: SpendClass) => row('proxy_system', networkClass)?.spent_credits ?? 0n;
  return {
    relay: {
      mainnet: { limitMicro: limits.relayTotalMicro, spentMicro: relayMicro('mainnet') },
      testnet: { limitMicro: limits.relayTotalMicro, spentMicro: relayMicro('testnet') },
    },
    proxy: {
      mainnet: { limitMicro: limits.proxyTotalMicro, spentMicro: proxyCredits('mainnet') * MICRO_PER_CREDIT },
      testnet: { limitMicro: limits.proxyTotalMicro, spentMicro: proxyCredits('testnet') * MICRO_PER_CREDIT },
    },
  };
}

/**
 * The maxima of upto permits admitted on /relay and not yet settled or ended, for the whole service
 * per network class, in micro-USDC (upto_exposure: admit_relay_payment moves it within its bounds,
 * a trigger takes it back): the gauge prs_upto_exposure_micro_usdc.
 */
export async function openUptoExposure(db: Db): Promise<Record<'mainnet' | 'testnet', bigint>> {
  const rows = await db
    .selectFrom('upto_exposure')
    .select(['network_class', 'open_micro'])
    .where('scope', '=', 'total')
    .where('scope_id', '=', SYSTEM_SCOPE_ID)
    .execute();
  const open = (networkClass: 'mainnet' | 'testnet') =>
    rows.find((row) => row.network_class === networkClass)?.open_micro ?? 0n;
  return { mainnet: open('mainnet'), testnet: open('testnet') };
}

/**
 * Whether an upto permit of `maximumMicro` fits under the service's bound now (a hint for our
 * first 402, which cannot know the payer: at the bound it offers exact only; the admission decides).
 */
export async function uptoExposureRoom(
  db: Db,
  networkClass: 'mainnet' | 'testnet',
  maximumMicro: bigint,
  totalMicro: bigint,
): Promise<boolean> {
  const row = await db
    .selectFrom('upto_exposure')
    .select('open_micro')
    .where('scope', '=', 'total')
    .where('scope_id', '=', SYSTEM_SCOPE_ID)
    .where('network_class', '=', networkClass)
    .executeTakeFirst();
  return (row?.open_micro ?? 0n) + maximumMicro <= totalMicro;
}
