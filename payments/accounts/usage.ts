/**
 * What an organisation can read of its own money: the history of its /proxy payments and of the
 * credit movements of its own (grants, purchases), and its spend by day, by key and by target host.
 * The history reads the records the money moves in (proxy_payments, credit_ledger, and for a
 * purchase the payment that bought it: credit_purchases, relay_transactions); the spend reads
 * the daily summary of proxy_payments (usage_daily), which triggers of the database move in the
 * same transaction as every write of a payment, so that it always equals the sums of the records.
 * Only the rows of the organisation that asks: every statement here filters by its id, whatever
 * else is asked.
 *
 * A /proxy payment is one item whose status says where its credits went: pending (reserved or
 * signed), charged, or released. /relay calls are not here: they are paid by a wallet, not by an
 * organisation's key.
 */
import { createHash } from 'node:crypto';
import { sql, type RawBuilder, type SelectQueryBuilder, type SqlBool } from 'kysely';
import type { Db } from '../../db/index';
import { addDays, utcDay } from '../basics/clock';
import type { NetworkSettings } from '../basics/config';
import { MICRO_PER_CREDIT } from '../basics/money';
import { canonicalNetwork, NETWORK_TABLE } from '../basics/networkTable';
import { fail, ok, type Result } from '../basics/result';

/** The most items of one page, and the page a request that names none gets. */
export const PAGE_LIMIT_MAX = 200;
export const PAGE_LIMIT_DEFAULT = 50;
/** The longest range GET /v1/usage sums over, in days, and the range it sums when none is given. */
export const USAGE_RANGE_MAX_DAYS = 90;
export const USAGE_RANGE_DEFAULT_DAYS = 30;
/** The most target hosts a usage report lists (the largest spend first); the rest are summed in the totals only. */
export const USAGE_HOSTS_MAX = 100;

export type ActivityKind = 'proxy_payment' | 'grant' | 'purchase';
export type ActivityStatus = 'pending' | 'charged' | 'released' | 'credited';

/** The ledger's kinds that are movements of their own, not a step of a proxy payment (which is its own item). */
const MOVEMENT_KINDS = ['grant', 'purchase'] as const satisfies readonly ActivityKind[];
/** The ledger's steps of a proxy payment, outside the partial index of movements (the migration ..._usage_reads). */
const PAYMENT_STEP_KINDS = ['reserve', 'charge', 'release'] as const;

const PAYMENT_STATES: Record<
  Exclude<ActivityStatus, 'credited'>,
  Array<'reserved' | 'signed' | 'charged' | 'released'>
> = {
  pending: ['reserved', 'signed'],
  charged: ['charged'],
  released: ['released'],
};

export interface ActivityFilters {
  /** The prefix of one of the organisation's keys (prs_ and 10 characters). */
  keyPrefix?: string;
  /** A target's host as `new URL(url).host` gives it (host, and port where not the scheme's default). */
  host?: string;
  status?: ActivityStatus;
  kind?: ActivityKind;
  /** Items created at or after this instant. */
  from?: Date;
  /** Items created before this instant. */
  to?: Date;
}

export interface Activity {
  /** The item's id as the API shows it: `pay_<id>` for a proxy payment, `crd_<id>` for a ledger entry. */
  id: string;
  kind: ActivityKind;
  status: ActivityStatus;
  /** The creation instant as Postgres holds it (microseconds, UTC, ISO 8601). */
  createdAt: string;
  settledAt: Date | null;
  keyPrefix: string | null;
  targetUrl: string | null;
  network: string | null;
  /** What the target was paid (a proxy payment), or what the organisation paid (a purchase), in micro-USDC. */
  amountMicroUsdc: bigint | null;
  credits: bigint;
  txHash: string | null;
  webhookId: string | null;
}

export interface ActivityPage {
  items: Activity[];
  /** The cursor of the next page; null on the last one. */
  nextCursor: string | null;
}

export type ActivityRefusal = 'cursor_invalid' | 'cursor_other_organisation' | 'cursor_other_query';

/** The order of the history: newest first; at one instant, proxy payments (rank 1) before ledger entries (rank 0), then by id. */
interface Position {
  createdAt: string;
  rank: 0 | 1;
  id: bigint;
}

interface CursorContent extends Position {
  organisationId: bigint;
  query: string;
}

const CREATED_AT_TEXT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const BIGINT_MAX = 9_223_372_036_854_775_807n;

/**
 * Whether a cursor's instant is one Postgres reads as it is written: a day of its month, a time of
 * day without a leap second, a year from 1 (Postgres has no year 0). Cursors are not signed: they
 * reach only the caller's own rows, so an edited one needs no secret to refuse, only every field
 * checked before it reaches a query.
 */
function isExactInstant(text: string): boolean {
  if (!CREATED_AT_TEXT.test(text) || text.startsWith('0000')) return false;
  const time = Date.parse(text);
  // Date.parse rolls 2026-02-30 over to March 2; the round trip shows it.
  return !Number.isNaN(time) && new Date(time).toISOString().slice(0, 19) === text.slice(0, 19);
}

function isBigintId(text: string): boolean {
  return /^[0-9]{1,19}$/.test(text) && BigInt(text) <= BIGINT_MAX;
}

/** A fingerprint of the filters: a cursor continues the query it was made for, not another. */
function queryFingerprint(filters: ActivityFilters): string {
  const normal = [
    filters.keyPrefix ?? '',
    filters.host?.toLowerCase() ?? '',
    filters.status ?? '',
    filters.kind ?? '',
    filters.from?.toISOString() ?? '',
    filters.to?.toISOString() ?? '',
  ];
  return createHash('sha256').update(JSON.stringify(normal)).digest('base64url').slice(0, 16);
}

function encodeCursor(content: CursorContent): string {
  const fields = [
    '1',
    content.organisationId.toString(),
    content.query,
    content.createdAt,
    String(content.rank),
    content.id.toString(),
  ];
  return Buffer.from(fields.join('|'), 'utf8').toString('base64url');
}

/**
 * The position a cursor names, when it was made for this organisation and these filters. A cursor
 * names its organisation; the rows are read for the caller's organisation in any case, so a
 * cursor can never reach another's rows, and one made for another is refused outright.
 */
function decodeCursor(
  cursor: string,
  organisationId: bigint,
  filters: ActivityFilters,
): Result<Position, ActivityRefusal> {
  const invalid = fail(
    'cursor_invalid' as const,
    'The cursor is not one this service gave out; start again without it.',
  );
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) return invalid;
  const fields = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  if (fields.length !== 6) return invalid;
  const [version, organisation, query, createdAt, rank, id] = fields as [
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  if (
    version !== '1' ||
    !/^[0-9]{1,19}$/.test(organisation) ||
    !isBigintId(id) ||
    (rank !== '0' && rank !== '1') ||
    !isExactInstant(createdAt)
  )
    return invalid;
  if (BigInt(organisation) !== organisationId)
    return fail('cursor_other_organisation', "The cursor belongs to another organisation's history.");
  if (query !== queryFingerprint(filters))
    return fail(
      'cursor_other_query',
      'The cursor was given for other filters; repeat the filters of the first page, or start again without it.',
    );
  return ok({ createdAt, rank: rank === '1' ? 1 : 0, id: BigInt(id) });
}

/** A row's creation instant as exact text (microseconds): a cursor must name it without a float's rounding. */
function createdAtText(table: 'proxy_payments' | 'credit_ledger'): RawBuilder<string> {
  return sql<string>`to_char(${sql.ref(`${table}.created_at`)} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

/**
 * Rows after `position` in the history's order, for a source of rank `rank`: its rows at the
 * cursor's instant come after it only when their rank is lower, or equal with a lower id.
 */
function after(table: 'proxy_payments' | 'credit_ledger', rank: 0 | 1, position: Position): RawBuilder<SqlBool> {
  const createdAt = sql.ref(`${table}.created_at`);
  const id = sql.ref(`${table}.id`);
  const at = sql`${position.createdAt}::timestamptz`;
  if (rank < position.rank) return sql<SqlBool>`${createdAt} <= ${at}`;
  if (rank > position.rank) return sql<SqlBool>`${createdAt} < ${at}`;
  return sql<SqlBool>`(${createdAt} < ${at} or (${createdAt} = ${at} and ${id} < ${position.id}))`;
}

/**
 * The steps both sources of the history take alike: the organisation's keys asked for, the time
 * range, the rows after the cursor, the history's order (newest first, then the highest id) and
 * the page's size.
 */
function readPage<DB, TB extends keyof DB, O>(
  query: SelectQueryBuilder<DB, TB, O>,
  table: 'proxy_payments' | 'credit_ledger',
  rank: 0 | 1,
  page: { filters: ActivityFilters; keyIds: bigint[] | undefined; position: Position | undefined; rows: number },
): Promise<O[]> {
  const createdAt = sql.ref<Date>(`${table}.created_at`);
  const { filters, keyIds, position, rows } = page;
  if (keyIds !== undefined) query = query.where(sql.ref<bigint>(`${table}.api_key_id`), 'in', keyIds);
  if (filters.from !== undefined) query = query.where(createdAt, '>=', filters.from);
  if (filters.to !== undefined) query = query.where(createdAt, '<', filters.to);
  if (position !== undefined) query = query.where(after(table, rank, position));
  return query
    .orderBy(createdAt, 'desc')
    .orderBy(sql.ref(`${table}.id`), 'desc')
    .limit(rows)
    .execute();
}

/**
 * One page of the organisation's history, newest first. Each of the two sources is read with its
 * own index (at most limit + 1 rows each) and the two are merged here.
 */
export async function listActivity(
  db: Db,
  organisationId: bigint,
  filters: ActivityFilters,
  options: { limit: number; cursor?: string },
): Promise<Result<ActivityPage, ActivityRefusal>> {
  const limit = Math.min(Math.max(1, Math.trunc(options.limit)), PAGE_LIMIT_MAX);
  let position: Position | undefined;
  if (options.cursor !== undefined) {
    const decoded = decodeCursor(options.cursor, organisationId, filters);
    if (!decoded.ok) return decoded;
    position = decoded.value;
  }
  let keyIds: bigint[] | undefined;
  if (filters.keyPrefix !== undefined) {
    const keys = await db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select('api_keys.id')
      .where('accounts.organisation_id', '=', organisationId)
      .where('api_keys.prefix', '=', filters.keyPrefix)
      .execute();
    // A prefix that is not one of the organisation's keys matches nothing, as an unused key of its own would.
    if (keys.length === 0) return ok({ items: [], nextCursor: null });
    keyIds = keys.map((key) => key.id);
  }
  const [payments, movements] = await Promise.all([
    readPayments(db, organisationId, filters, keyIds, position, limit + 1),
    readMovements(db, organisationId, filters, keyIds, position, limit + 1),
  ]);
  const merged = [...payments, ...movements].sort(compareNewestFirst);
  const page = merged.slice(0, limit);
  const last = page.at(-1);
  const nextCursor =
    merged.length > limit && last !== undefined
      ? encodeCursor({
          organisationId,
          query: queryFingerprint(filters),
          createdAt: last.position.createdAt,
          rank: last.position.rank,
          id: last.position.id,
        })
      : null;
  return ok({ items: page.map((entry) => entry.activity), nextCursor });
}

interface Positioned {
  position: Position;
  activity: Activity;
}

function compareNewestFirst(a: Positioned, b: Positioned): number {
  if (a.position.createdAt !== b.position.createdAt) return a.position.createdAt < b.position.createdAt ? 1 : -1;
  if (a.position.rank !== b.position.rank) return b.position.rank - a.position.rank;
  if (a.position.id === b.position.id) return 0;
  return a.position.id < b.position.id ? 1 : -1;
}

async function readPayments(
  db: Db,
  organisationId: bigint,
  filters: ActivityFilters,
  keyIds: bigint[] | undefined,
  position: Position | undefined,
  rows: number,
): Promise<Positioned[]> {
  if (filters.kind !== undefined && filters.kind !== 'proxy_payment') return [];
  if (filters.status === 'credited') return [];
  let query = db
    .selectFrom('proxy_payments')
    .leftJoin('api_keys', 'api_keys.id', 'proxy_payments.api_key_id')
    .select([
      'proxy_payments.id',
      createdAtText('proxy_payments').as('created_at_text'),
      'proxy_payments.settled_at',
      'proxy_payments.state',
      'api_keys.prefix',
      'proxy_payments.target_url',
      'proxy_payments.network',
      'proxy_payments.amount_micro_usdc',
      'proxy_payments.credits',
      'proxy_payments.tx_hash',
      'proxy_payments.webhook_id',
    ])
    .where('proxy_payments.organisation_id', '=', organisationId);
  if (filters.host !== undefined) query = query.where('proxy_payments.target_host', '=', filters.host.toLowerCase());
  if (filters.status !== undefined) query = query.where('proxy_payments.state', 'in', PAYMENT_STATES[filters.status]);
  const found = await readPage(query, 'proxy_payments', 1, { filters, keyIds, position, rows });
  return found.map((row) => ({
    position: { createdAt: row.created_at_text, rank: 1, id: row.id },
    activity: {
      id: `pay_${row.id}`,
      kind: 'proxy_payment',
      status: row.state === 'reserved' || row.state === 'signed' ? 'pending' : row.state,
      createdAt: row.created_at_text,
      settledAt: row.settled_at,
      keyPrefix: row.prefix,
      targetUrl: row.target_url,
      network: row.network,
      amountMicroUsdc: row.amount_micro_usdc,
      credits: row.credits,
      txHash: row.tx_hash,
      webhookId: row.webhook_id,
    },
  }));
}

async function readMovements(
  db: Db,
  organisationId: bigint,
  filters: ActivityFilters,
  keyIds: bigint[] | undefined,
  position: Position | undefined,
  rows: number,
): Promise<Positioned[]> {
  if (filters.kind === 'proxy_payment' || filters.host !== undefined) return [];
  if (filters.status !== undefined && filters.status !== 'credited') return [];
  const kinds = filters.kind === undefined ? MOVEMENT_KINDS : MOVEMENT_KINDS.filter((kind) => kind === filters.kind);
  const query = db
    .selectFrom('credit_ledger')
    .leftJoin('api_keys', 'api_keys.id', 'credit_ledger.api_key_id')
    // A purchase's entry names its purchase (`purchase:<id>:<transaction>`, payments/operations/purchase/call.ts),
    // whose payment is a relay transaction: its network, amount, transaction and webhook record.
    .leftJoin('credit_purchases', (join) =>
      join.on(
        'credit_purchases.id',
        '=',
        sql<bigint>`case when credit_ledger.kind = 'purchase' and credit_ledger.reference ~ '^purchase:[0-9]{1,18}:'
          then split_part(credit_ledger.reference, ':', 2)::bigint end`,
      ),
    )
    .leftJoin('relay_transactions', 'relay_transactions.id', 'credit_purchases.relay_transaction_id')
    .select([
      'credit_ledger.id',
      createdAtText('credit_ledger').as('created_at_text'),
      'credit_ledger.created_at',
      'credit_ledger.kind',
      'api_keys.prefix',
      'credit_ledger.amount_credits',
      'relay_transactions.network',
      'relay_transactions.amount_micro',
      'relay_transactions.client_tx_hash',
      'credit_purchases.webhook_id',
    ])
    .where('credit_ledger.organisation_id', '=', organisationId)
    // The predicate of the partial index credit_ledger_organisation_movements, so that it is used.
    .where('credit_ledger.kind', 'not in', PAYMENT_STEP_KINDS)
    .where('credit_ledger.kind', 'in', kinds);
  const found = await readPage(query, 'credit_ledger', 0, { filters, keyIds, position, rows });
  return found.map((row) => ({
    position: { createdAt: row.created_at_text, rank: 0, id: row.id },
    activity: {
      id: `crd_${row.id}`,
      kind: row.kind as ActivityKind,
      status: 'credited',
      createdAt: row.created_at_text,
      settledAt: row.created_at,
      keyPrefix: row.prefix,
      targetUrl: null,
      network: row.network,
      amountMicroUsdc: row.amount_micro,
      credits: row.amount_credits,
      txHash: row.client_tx_hash,
      webhookId: row.webhook_id,
    },
  }));
}

/** A target URL as the history shows it: origin and path, never the query string, the fragment or credentials. */
export function targetOriginAndPath(targetUrl: string): { origin: string; path: string } | null {
  try {
    const url = new URL(targetUrl);
    return { origin: url.origin, path: url.pathname };
  } catch {
    return null;
  }
}

const LOOPBACK_HOSTS = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/i;

/**
 * The public explorer's page of a transaction, where the network has one we know and the service
 * pays on the public chain: a service on a local chain (the sandbox, the tests) has no explorer.
 */
export function explorerUrl(network: string | null, txHash: string | null, networks: NetworkSettings[]): string | null {
  if (network === null || txHash === null || txHash === '') return null;
  const name = canonicalNetwork(network);
  if (name === undefined) return null;
  const template = NETWORK_TABLE[name].explorerTxUrl;
  const settings = networks.find((candidate) => candidate.name === name);
  if (template === undefined || settings === undefined) return null;
  let rpcHostname: string;
  try {
    rpcHostname = new URL(settings.rpcUrl).hostname;
  } catch {
    return null;
  }
  if (LOOPBACK_HOSTS.test(rpcHostname)) return null;
  return template.replace('{tx}', encodeURIComponent(txHash));
}

// ---------------------------------------------------------------------------------------------
// Usage

export interface UsageRange {
  /** First UTC day, inclusive (YYYY-MM-DD). */
  fromDay: string;
  /** Last UTC day, inclusive. */
  toDay: string;
}

export type UsageRangeRefusal = 'range_reversed' | 'range_too_long';

function daysBetween(fromDay: string, toDay: string): number {
  return Math.round((Date.parse(`${toDay}T00:00:00Z`) - Date.parse(`${fromDay}T00:00:00Z`)) / 86_400_000);
}

/**
 * The days a report covers: both given, or the default's missing end (to: today; from: the
 * USAGE_RANGE_DEFAULT_DAYS days ending at `to`). At most USAGE_RANGE_MAX_DAYS days, both included.
 */
export function usageRange(
  from: string | undefined,
  to: string | undefined,
  now: Date,
): Result<UsageRange, UsageRangeRefusal> {
  const toDay = to ?? (from === undefined ? utcDay(now) : defaultEnd(from, utcDay(now)));
  const fromDay = from ?? laterDay(addDays(toDay, -(USAGE_RANGE_DEFAULT_DAYS - 1)), FIRST_DAY);
  const days = daysBetween(fromDay, toDay) + 1;
  if (days < 1) return fail('range_reversed', `from (${fromDay}) is after to (${toDay}).`);
  if (days > USAGE_RANGE_MAX_DAYS)
    return fail(
      'range_too_long',
      `The range from ${fromDay} to ${toDay} covers ${days} days; at most ${USAGE_RANGE_MAX_DAYS} days are summed at once.`,
    );
  return ok({ fromDay, toDay });
}

/** The days a date of four-digit year can name (RFC 3339): a range never leaves them. */
const FIRST_DAY = '0000-01-01';
const LAST_DAY = '9999-12-31';

/** Compared as days, not as text: past year 9999 a day is written '+010000-01-01', which sorts first. */
function laterDay(a: string, b: string): string {
  return daysBetween(a, b) > 0 ? b : a;
}

function earlierDay(a: string, b: string): string {
  return daysBetween(a, b) < 0 ? b : a;
}

/** Given only `from`: up to today, never before `from`, never past the bound nor the last day. */
function defaultEnd(from: string, today: string): string {
  return earlierDay(earlierDay(laterDay(today, from), addDays(from, USAGE_RANGE_MAX_DAYS - 1)), LAST_DAY);
}

/** Spend of one bucket: charged payments, and the credits of payments released or still pending. */
export interface UsageFigures {
  payments: bigint;
  credits: bigint;
  /** What the targets were paid, in micro-USDC. */
  amountMicroUsdc: bigint;
  /** credits x 1000 - amount: our fee and the rounding up to a whole credit, in micro-USDC. */
  feeMicroUsdc: bigint;
  releasedPayments: bigint;
  releasedCredits: bigint;
  pendingPayments: bigint;
  pendingCredits: bigint;
}

export interface UsageReport extends UsageRange {
  totals: UsageFigures & { grantedCredits: bigint; purchasedCredits: bigint };
  byDay: Array<{ day: string } & UsageFigures>;
  byKey: Array<{ keyPrefix: string } & UsageFigures>;
  byHost: Array<{ host: string } & UsageFigures>;
  /** More hosts had spend than byHost lists (USAGE_HOSTS_MAX). */
  hostsTruncated: boolean;
}

interface UsageRow {
  dimension: 'day' | 'key' | 'host';
  day: string | null;
  api_key_id: bigint | null;
  target_host: string | null;
  payments: bigint;
  credits: bigint;
  amount_micro_usdc: bigint;
  released_payments: bigint;
  released_credits: bigint;
  pending_payments: bigint;
  pending_credits: bigint;
}

function zero(): UsageFigures {
  return {
    payments: 0n,
    credits: 0n,
    amountMicroUsdc: 0n,
    feeMicroUsdc: 0n,
    releasedPayments: 0n,
    releasedCredits: 0n,
    pendingPayments: 0n,
    pendingCredits: 0n,
  };
}

function figuresOf(row: UsageRow): UsageFigures {
  return {
    payments: row.payments,
    credits: row.credits,
    amountMicroUsdc: row.amount_micro_usdc,
    feeMicroUsdc: row.credits * MICRO_PER_CREDIT - row.amount_micro_usdc,
    releasedPayments: row.released_payments,
    releasedCredits: row.released_credits,
    pendingPayments: row.pending_payments,
    pendingCredits: row.pending_credits,
  };
}

function add(into: UsageFigures, figures: UsageFigures): void {
  for (const name of Object.keys(into) as Array<keyof UsageFigures>) into[name] += figures[name];
}

/** Largest spend first; then the most credits released or pending, then by name. */
function bySpend<T extends UsageFigures>(name: (item: T) => string) {
  return (a: T, b: T) =>
    a.credits !== b.credits
      ? a.credits > b.credits
        ? -1
        : 1
      : a.releasedCredits + a.pendingCredits !== b.releasedCredits + b.pendingCredits
        ? a.releasedCredits + a.pendingCredits > b.releasedCredits + b.pendingCredits
          ? -1
          : 1
        : name(a).localeCompare(name(b));
}

/**
 * Spend of the organisation's /proxy payments over the days of `range` (UTC, by the day each
 * payment was made, as the daily caps count it), by day, by key and by target host: one scan of
 * the organisation's daily summary rows of the range (usage_daily: one per day, key and host, not
 * one per payment, settled payments only) and of its payments still open, with three groupings.
 * Every day of the range is listed.
 */
export async function usageReport(db: Db, organisationId: bigint, range: UsageRange): Promise<UsageReport> {
  const from = new Date(`${range.fromDay}T00:00:00.000Z`);
  const to = new Date(`${addDays(range.toDay, 1)}T00:00:00.000Z`);
  const [grouped, granted] = await Promise.all([
    sql<UsageRow>`
      select
        case when grouping(day) = 0 then 'day' when grouping(api_key_id) = 0 then 'key' else 'host' end as dimension,
        to_char(day, 'YYYY-MM-DD') as day, api_key_id, target_host,
        sum(charged_payments)::bigint as payments,
        sum(charged_credits)::bigint as credits,
        sum(charged_amount_micro_usdc)::bigint as amount_micro_usdc,
        sum(released_payments)::bigint as released_payments,
        sum(released_credits)::bigint as released_credits,
        sum(pending_payments)::bigint as pending_payments,
        sum(pending_credits)::bigint as pending_credits
      from (
        select day, api_key_id, target_host, charged_payments, charged_credits, charged_amount_micro_usdc,
          released_payments, released_credits, 0 as pending_payments, 0 as pending_credits
        from usage_daily
        where organisation_id = ${organisationId}
          and day >= (${from}::timestamptz at time zone 'UTC')::date and day < (${to}::timestamptz at time zone 'UTC')::date
        union all
        -- The payments still open, from their rows (the summary keeps settled ones only): few and
        -- short-lived, found through proxy_payments_open, whose predicate this is.
        select (created_at at time zone 'UTC')::date, api_key_id, coalesce(target_host, ''), 0, 0, 0, 0, 0, 1, credits
        from proxy_payments
        where state in ('reserved', 'signed') and organisation_id = ${organisationId}
          and created_at >= ${from} and created_at < ${to}
      ) as spend
      group by grouping sets ((day), (api_key_id), (target_host))
      having sum(charged_payments + released_payments + pending_payments) > 0`.execute(db),
    db
      .selectFrom('credit_ledger')
      .select([
        sql<bigint>`coalesce(sum(amount_credits) filter (where kind = 'grant'), 0)::bigint`.as('granted'),
        sql<bigint>`coalesce(sum(amount_credits) filter (where kind = 'purchase'), 0)::bigint`.as('purchased'),
      ])
      .where('organisation_id', '=', organisationId)
      .where('kind', 'not in', PAYMENT_STEP_KINDS)
      .where('kind', 'in', MOVEMENT_KINDS)
      .where('created_at', '>=', from)
      .where('created_at', '<', to)
      .executeTakeFirstOrThrow(),
  ]);
  const days = new Map<string, UsageFigures>();
  // By count, not by comparing day strings: past year 9999 a day is written '+010000-01-01', which sorts first.
  for (let offset = 0; offset <= daysBetween(range.fromDay, range.toDay); offset += 1)
    days.set(addDays(range.fromDay, offset), zero());
  const keyRows: Array<{ apiKeyId: bigint } & UsageFigures> = [];
  const hosts: Array<{ host: string } & UsageFigures> = [];
  const totals = zero();
  for (const row of grouped.rows) {
    const figures = figuresOf(row);
    if (row.dimension === 'day' && row.day !== null) {
      days.set(row.day, figures);
      add(totals, figures);
    } else if (row.dimension === 'key' && row.api_key_id !== null) {
      keyRows.push({ apiKeyId: row.api_key_id, ...figures });
    } else if (row.dimension === 'host') {
      hosts.push({ host: row.target_host ?? '', ...figures });
    }
  }
  const prefixes = new Map<bigint, string>();
  if (keyRows.length > 0) {
    const keys = await db
      .selectFrom('api_keys')
      .select(['id', 'prefix'])
      .where(
        'id',
        'in',
        keyRows.map((row) => row.apiKeyId),
      )
      .execute();
    for (const key of keys) prefixes.set(key.id, key.prefix);
  }
  const byKey = keyRows
    .map(({ apiKeyId, ...figures }) => ({ keyPrefix: prefixes.get(apiKeyId) ?? '', ...figures }))
    .sort(bySpend((item) => item.keyPrefix));
  hosts.sort(bySpend((item) => item.host));
  return {
    ...range,
    totals: { ...totals, grantedCredits: granted.granted, purchasedCredits: granted.purchased },
    byDay: [...days].map(([day, figures]) => ({ day, ...figures })),
    byKey,
    byHost: hosts.slice(0, USAGE_HOSTS_MAX),
    hostsTruncated: hosts.length > USAGE_HOSTS_MAX,
  };
}
