/**
 * Paying a target through a batch-settlement channel (x402's batch-settlement scheme), the steps
 * /proxy shares with whatever else pays that way. One open channel per network, token, receiver,
 * receiver authorizer and withdraw delay (payer_channels); per call, one voucher whose cumulative
 * ceiling is the seller's charge so far plus this call's price, and a deposit with it when the
 * channel's balance does not cover that ceiling: an ERC-3009 authorization, or where the seller's
 * token moves by Permit2 a Permit2 witness transfer, after our wallet's one standing approval of
 * Permit2 on that token (./approval.ts, recorded in spending_approvals, never given per call).
 *
 * The rules:
 * - A channel serves one call at a time, in every instance: a Postgres advisory lock on its terms
 *   is held from before the channel is read until the answer is recorded (and calls of this
 *   process wait in line for it without holding a connection).
 * - Every voucher is recorded (payer_vouchers, with the channel's highest signed ceiling) before
 *   it is sent, so no crash can make us sign a second ceiling for money already promised without
 *   knowing it; a voucher still `sent` when the next call takes the lock belonged to a call that
 *   died and becomes `unknown`.
 * - A seller's answer decides a voucher: a paid answer's `extra.chargedAmount` (at most the
 *   voucher's increment) is charged; an answer without a charge (the target failed, refused) is
 *   not; no answer leaves it `unknown` until the seller's next word on the channel (an accepted
 *   voucher on the same base says it was not committed; a proven corrective 402 above its ceiling
 *   says it was) or the chain (claimed at or above its ceiling) decides.
 * - A corrective 402 is adopted only once its voucher signature recovers to our own key (and the
 *   chain's claimed total agrees), then the call is tried once more on the corrected base.
 */
import { randomBytes } from 'node:crypto';
import { sql, type RawBuilder, type Selectable } from 'kysely';
import { toHex, type Hex } from 'viem';
import type { Db } from '../../db/index';
import { runPrepared } from '../../db/prepared';
import type { PayerChannelsTable, PayerVouchersTable } from '../../db/schema';
import type { Deps } from '../deps';
import { assetToMicro, microToAsset, parseUsdc } from '../basics/money';
import { caip2Of, NETWORK_TABLE, type NetworkName } from '../basics/networkTable';
import {
  buildTargetRequest,
  type CallRequest,
  type TargetAnswer,
  type TargetRequest,
  type TargetResponse,
} from '../basics/http/index';
import type { Ok } from '../basics/result';
import {
  channelIdOf,
  channelTerms,
  checkedCorrection,
  payerChannelConfig,
  readPayerChannel,
  signChannelPayment,
  type ChannelPayload,
  type DepositMethod,
  type PayerChannelConfig,
} from '../chains/evm/batchSettlement/payer';
import type { PaymentChoice } from '../x402/choose';
import { ourPaymentId } from '../x402/extensions';
import { PAYMENT_REQUIRED_HEADER, PAYMENT_RESPONSE_HEADER, type PaymentRequirementsV2 } from '../x402/v2';
import { ensureSpendingApproval } from './approval';
import { callTarget, type CallBudget } from './call';
import { paymentSignatureHeader } from './pay';

export type PayerChannel = Selectable<PayerChannelsTable>;
export type PayerVoucher = Selectable<PayerVouchersTable>;

/** The error codes of a seller's corrective 402 (x402 batch-settlement, EVM). */
const CORRECTIVE_ERRORS = new Set([
  'invalid_batch_settlement_evm_cumulative_amount_mismatch',
  'invalid_batch_settlement_evm_cumulative_amount_below_claimed',
]);

export type ChannelDeps = Pick<
  Deps,
  'db' | 'chains' | 'config' | 'log' | 'clock' | 'resolver' | 'connections' | 'submissions' | 'paymentBounds'
>;

/** How one call paid through a channel ended. Amounts in the token's atomic units. */
export type ChannelCallOutcome =
  /** The target answered and the seller committed `chargedAtomic` (0 for a free answer). */
  | {
      kind: 'charged';
      response: TargetResponse;
      chargedAtomic: bigint;
      voucherId: bigint;
      channelId: string;
      /** The columns the caller's `chargeAlong` read back, written with the answer's record. */
      along?: Record<string, unknown>;
    }
  /** The seller committed nothing: the target failed or refused the voucher; `response` when it answered. */
  | { kind: 'not_charged'; response?: TargetResponse; details: string; voucherId: bigint; channelId: string }
  /** No usable answer after the voucher left: whether it was committed is decided later. */
  | { kind: 'unknown'; details: string; voucherId: bigint; channelId: string; response?: TargetResponse }
  /** Nothing was signed: our policy or wallet cannot pay this channel (targetSide: the offer is at fault). */
  | { kind: 'unsigned'; details: string; targetSide: boolean; along?: Record<string, unknown> };

/** In-process queue per channel: one call of this process at a time asks Postgres for the lock. */
const queues = new Map<string, Promise<unknown>>();

async function inLine<T>(key: string, run: () => Promise<T>): Promise<T> {
  const before = queues.get(key) ?? Promise.resolve();
  const mine = before.then(run, run);
  const settled = mine.catch(() => undefined);
  queues.set(key, settled);
  try {
    return await mine;
  } finally {
    if (queues.get(key) === settled) queues.delete(key);
  }
}

/**
 * One channel call's connection of the pool: every statement of the call runs on it, and so does
 * the advisory lock of the channel's terms, a session lock taken by `lock()` (waiting for it), or
 * by the first statement that needs it (recordVoucher's `pg_try_advisory_lock`, no round trip of
 * its own), and released after the call on the same connection.
 */
interface ChannelSession {
  db: Db;
  key: string;
  held: boolean;
  lock(): Promise<void>;
}

/**
 * Runs `run` in a channel session (calls of this process on the same terms one after another). Its
 * result is handed back as soon as `run` ends; the unlock follows on the same connection, and the
 * next call of this process on these terms starts only after it.
 */
async function inChannelSession<T>(db: Db, key: string, run: (session: ChannelSession) => Promise<T>): Promise<T> {
  let hand!: { resolve: (value: T) => void; reject: (error: unknown) => void };
  const result = new Promise<T>((resolve, reject) => (hand = { resolve, reject }));
  const held = inLine(key, () =>
    db.connection().execute(async (connection) => {
      const session: ChannelSession = {
        db: connection,
        key,
        held: false,
        async lock() {
          if (session.held) return;
          await sql`select pg_advisory_lock(hashtextextended(${key}, 0))`.execute(connection);
          session.held = true;
        },
      };
      try {
        hand.resolve(await run(session));
      } finally {
        if (session.held) {
          // After the caller's answer went out: what follows the result is promises already
          // settled (microtasks) up to the write of the reply, which run before this turn ends;
          // the unlock's round trip (and Postgres's work for it) would otherwise come first.
          await new Promise((resolve) => setImmediate(resolve));
          await sql`select pg_advisory_unlock(hashtextextended(${key}, 0))`.execute(connection);
        }
      }
    }),
  );
  // A failure before or inside `run` is the caller's; one of the unlock alone (the connection's
  // end releases the lock anyway) comes after the result was handed back and changes nothing.
  held.catch((error: unknown) => hand.reject(error));
  return result;
}

/** Runs `run` holding the advisory lock of a channel's terms on one connection of the pool. */
function underChannelLock<T>(db: Db, key: string, run: () => Promise<T>): Promise<T> {
  return inChannelSession(db, key, async (session) => {
    await session.lock();
    return run();
  });
}

/** The channel's terms as its lock key and its row's unique key. */
function termsKey(
  network: NetworkName,
  terms: { token: string; receiver: string; receiverAuthorizer: string; withdrawDelay: number },
) {
  return `payer-channel:${network}:${terms.token.toLowerCase()}:${terms.receiver.toLowerCase()}:${terms.receiverAuthorizer.toLowerCase()}:${terms.withdrawDelay}`;
}

/** The channel's configuration as the contract takes it, from its row. */
export function configOf(channel: PayerChannel): PayerChannelConfig {
  return {
    payer: channel.payer as Hex,
    payerAuthorizer: channel.payer_authorizer as Hex,
    receiver: channel.receiver as Hex,
    receiverAuthorizer: channel.receiver_authorizer as Hex,
    token: channel.token as Hex,
    withdrawDelay: channel.withdraw_delay,
    salt: channel.salt as Hex,
  };
}

/**
 * The deposit a call needs, in atomic units: none while the balance covers the ceiling; else the
 * larger of the seller's announced minimum, `multiplier` times the price and the shortfall, at
 * most `cap` (a shortfall above the cap cannot be paid by channel).
 */
function depositFor(
  { balance, ceiling, price, minDeposit }: { balance: bigint; ceiling: bigint; price: bigint; minDeposit?: bigint },
  { multiplier, cap }: { multiplier: number; cap: bigint },
): { deposit?: bigint } | { refused: string } {
  if (ceiling <= balance) return {};
  const shortfall = ceiling - balance;
  let deposit = BigInt(multiplier) * price;
  if (minDeposit !== undefined && minDeposit > deposit) deposit = minDeposit;
  if (shortfall > deposit) deposit = shortfall;
  if (deposit > cap) {
    if (shortfall > cap || (minDeposit ?? 0n) > cap)
      return {
        refused: `the channel needs a deposit of ${deposit > shortfall ? (minDeposit ?? shortfall) : shortfall} atomic units, above our cap of ${cap} (PAYER_CHANNEL_MAX_DEPOSIT_USDC)`,
      };
    deposit = cap;
  }
  return { deposit };
}

/**
 * How a deposit moves the seller's token: as its offer names it (`extra.assetTransferMethod`), else
 * as the network moves its stablecoin (a token without ERC-3009 cannot be deposited otherwise).
 */
function depositMethodOf(offer: PaymentRequirementsV2, network: NetworkName): DepositMethod {
  const named = offer.extra.assetTransferMethod;
  if (named === 'permit2' || named === 'eip3009') return named;
  return NETWORK_TABLE[network].transferMethod === 'permit2' ? 'permit2' : 'eip3009';
}

/** The choice as our standing approval sees it: Permit2 on the token, for at least the deposit. */
function permit2DepositChoice(choice: PaymentChoice, deposit: bigint): PaymentChoice {
  return {
    ...choice,
    requirements: {
      ...choice.requirements,
      maxAmountRequired: deposit.toString(),
      extra: { ...choice.requirements.extra, assetTransferMethod: 'permit2' },
    },
  };
}

/** A voucher of the channel still open when a call takes its lock. */
interface OpenVoucher {
  id: bigint;
  state: 'sent' | 'unknown';
  deposit_atomic: string | null;
}

/**
 * The open channel for these terms (created, with a new salt, when there is none) and its vouchers
 * still open, read in one query under the channel's lock.
 */
async function openChannel(
  db: Db,
  network: NetworkName,
  payer: Hex,
  terms: { token: Hex; receiver: Hex; receiverAuthorizer: Hex; withdrawDelay: number },
): Promise<{ channel: PayerChannel; open: OpenVoucher[] }> {
  const existing = await db
    .selectFrom('payer_channels')
    .selectAll()
    .select(
      sql<{ id: string; state: 'sent' | 'unknown'; deposit_atomic: string | null }[]>`coalesce((
        select json_agg(json_build_object('id', v.id::text, 'state', v.state, 'deposit_atomic', v.deposit_atomic::text))
        from payer_vouchers v where v.channel_id = payer_channels.channel_id and v.state in ('sent', 'unknown')
      ), '[]'::json)`.as('open_vouchers'),
    )
    .where('network', '=', network)
    .where('token', '=', terms.token)
    .where('receiver', '=', terms.receiver)
    .where('receiver_authorizer', '=', terms.receiverAuthorizer)
    .where('withdraw_delay', '=', terms.withdrawDelay)
    .where('state', '=', 'open')
    .executeTakeFirst();
  if (existing) {
    const { open_vouchers: open, ...channel } = existing;
    return { channel, open: open.map((voucher) => ({ ...voucher, id: BigInt(voucher.id) })) };
  }
  const salt = toHex(randomBytes(32));
  const config = payerChannelConfig(payer, terms, salt);
  const channel = await db
    .insertInto('payer_channels')
    .values({
      channel_id: channelIdOf(config, caip2Of(network)).toLowerCase(),
      network,
      token: terms.token,
      payer,
      payer_authorizer: payer,
      receiver: terms.receiver,
      receiver_authorizer: terms.receiverAuthorizer,
      withdraw_delay: terms.withdrawDelay,
      salt,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  return { channel, open: [] };
}

/**
 * The channel's vouchers still open when a call takes its lock: one left `sent` belonged to a call
 * that ended without recording its answer (no one else holds the lock), and becomes `unknown`
 * (written only when there is one). Returns the unknown vouchers, with the deposit each carried.
 */
async function unknownVouchers(db: Db, channelId: string, open: OpenVoucher[]): Promise<OpenVoucher[]> {
  if (open.some((voucher) => voucher.state === 'sent'))
    await db
      .updateTable('payer_vouchers')
      .set({ state: 'unknown', details: 'no answer was recorded for this voucher' })
      .where('channel_id', '=', channelId)
      .where('state', '=', 'sent')
      .execute();
  return open;
}

/**
 * Every unknown voucher of the channel decided by what the seller is now known to have charged
 * before our latest voucher (`sellerCharged`): committed when its ceiling is within it (charged
 * at most its increment), never committed otherwise.
 */
async function decideUnknown(db: Db, channelId: string, sellerCharged: bigint): Promise<void> {
  const open = await db
    .selectFrom('payer_vouchers')
    .selectAll()
    .where('channel_id', '=', channelId)
    .where('state', '=', 'unknown')
    .execute();
  for (const voucher of open) {
    const base = BigInt(voucher.base_atomic);
    const ceiling = BigInt(voucher.ceiling_atomic);
    const committed = ceiling <= sellerCharged;
    const increment = ceiling - base;
    await db
      .updateTable('payer_vouchers')
      .set({
        state: committed ? 'charged' : 'not_charged',
        charged_atomic: committed ? (sellerCharged - base < increment ? sellerCharged - base : increment) : null,
        resolved_at: new Date(),
        details: committed
          ? `the seller's charge reached ${sellerCharged}, covering this voucher's ceiling`
          : `the seller's charge stayed at ${sellerCharged}, below this voucher's ceiling: never committed`,
      })
      .where('id', '=', voucher.id)
      .where('state', '=', 'unknown')
      .execute();
  }
}

interface SellerReceipt {
  success: boolean;
  /** The deposit's (or a refund's) transaction; empty for a voucher alone. */
  transaction: string;
  chargedAmount?: bigint;
  errorReason?: string;
}

function headerText(response: TargetResponse, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function base64Json(text: string | undefined): unknown {
  if (text === undefined || text.length > 64 * 1024) return undefined;
  try {
    return JSON.parse(Buffer.from(text, 'base64').toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

const DIGITS = /^(0|[1-9][0-9]{0,77})$/;
function atomic(value: unknown): bigint | undefined {
  return typeof value === 'string' && DIGITS.test(value) ? BigInt(value) : undefined;
}

/** The seller's PAYMENT-RESPONSE: success, its transaction, the charge it reports and why it refused. */
export function sellerReceiptOf(response: TargetResponse): SellerReceipt | undefined {
  const value = base64Json(headerText(response, PAYMENT_RESPONSE_HEADER)) as
    | {
        success?: unknown;
        transaction?: unknown;
        errorReason?: unknown;
        extra?: { chargedAmount?: unknown; channelState?: Record<string, unknown> };
      }
    | undefined;
  if (value === undefined || typeof value.success !== 'boolean') return undefined;
  const charged = atomic(value.extra?.chargedAmount);
  return {
    success: value.success,
    transaction: typeof value.transaction === 'string' ? value.transaction : '',
    ...(charged === undefined ? {} : { chargedAmount: charged }),
    ...(typeof value.errorReason === 'string' ? { errorReason: value.errorReason } : {}),
  };
}

/** A seller's 402 in version 2 (PAYMENT-REQUIRED), decoded, or undefined. */
function paymentRequiredOf(
  response: TargetResponse,
): ({ error?: string; accepts: PaymentRequirementsV2[] } & Record<string, unknown>) | undefined {
  if (response.status !== 402) return undefined;
  const value = base64Json(headerText(response, PAYMENT_REQUIRED_HEADER)) as
    ({ error?: unknown; accepts?: unknown } & Record<string, unknown>) | undefined;
  if (value === undefined || !Array.isArray(value.accepts)) return undefined;
  return value as { error?: string; accepts: PaymentRequirementsV2[] } & Record<string, unknown>;
}

/** The PAYMENT-SIGNATURE of a channel payload for the offer it answers. */
function channelHeader(
  offer: NonNullable<PaymentChoice['offerV2']>,
  network: NetworkName,
  payload: ChannelPayload,
  voucherId: bigint,
): string {
  return paymentSignatureHeader(
    offer,
    payload as unknown as Parameters<typeof paymentSignatureHeader>[1],
    ourPaymentId(network, `voucher:${voucherId}`),
  );
}

/**
 * The channel row of each terms key as this process last wrote it, when its last call there ended
 * with no voucher open, with the row's version then (xmin, which every write to the row changes).
 */
const lastKnownBy = new WeakMap<Db, Map<string, KnownChannel>>();

function lastKnownOf(db: Db): Map<string, KnownChannel> {
  let known = lastKnownBy.get(db);
  if (known === undefined) lastKnownBy.set(db, (known = new Map<string, KnownChannel>()));
  return known;
}

const ROW_VERSION = sql<string>`xmin::text`.as('row_version');

/**
 * Every column of payer_channels, named (the channel statements run prepared, which must not
 * return a table's `*`); a column added to the table and not here fails the typecheck.
 */
const CHANNEL_COLUMN_SET: Record<keyof PayerChannelsTable, true> = {
  channel_id: true,
  network: true,
  token: true,
  payer: true,
  payer_authorizer: true,
  receiver: true,
  receiver_authorizer: true,
  withdraw_delay: true,
  salt: true,
  deposited_atomic: true,
  charged_atomic: true,
  signed_max_atomic: true,
  balance_atomic: true,
  total_claimed_atomic: true,
  state: true,
  last_used_at: true,
  synced_at: true,
  created_at: true,
  refund_requested_at: true,
  refund_url: true,
  refund_tx_hash: true,
  withdraw_amount_atomic: true,
  withdraw_tx_hash: true,
  withdraw_tx_state: true,
  withdraw_finalize_after: true,
  finalize_tx_hash: true,
  finalize_tx_state: true,
  closing_details: true,
  closed_at: true,
};
const CHANNEL_COLUMNS = Object.keys(CHANNEL_COLUMN_SET);
const channelColumns = (table?: string) =>
  sql.join(CHANNEL_COLUMNS.map((name) => (table ? sql.ref(`${table}.${name}`) : sql.ref(name))));

function knownOf({ row_version: version, ...channel }: PayerChannel & { row_version: string }): KnownChannel {
  return { channel, version };
}

/**
 * What a caller writes in the statement that records a charged answer (its own charge for the
 * call): common table expressions, when any, and the columns it reads back. `flushed`: the
 * statement waits for its WAL flush (a charge nothing would decide again after a crash of the
 * database); else it does not (the voucher's own record stays as it was before it left).
 */
export interface AnswerAlong {
  ctes?: RawBuilder<unknown>;
  columns: RawBuilder<unknown>;
  flushed: boolean;
}

/**
 * What a caller writes in the statement that records the voucher, before it leaves (a hold of
 * what the call costs): its common table expressions, whether they admit the voucher (an SQL
 * boolean over them), and the columns it reads back of them. Not admitted, nothing is written.
 */
export interface VoucherAdmission {
  ctes: RawBuilder<unknown>;
  admits: RawBuilder<boolean>;
  columns: RawBuilder<unknown>;
  /** Whether the columns read back say the voucher was admitted. */
  admitted(along: Record<string, unknown>): boolean;
}

/** How the voucher's statement ended (the session's `held` says whether it now holds the lock). */
type VoucherRecord =
  | ({ kind: 'recorded'; voucherId: bigint } & KnownChannel)
  /** The admission refused: nothing was written; `along`, the admission's columns read back. */
  | { kind: 'refused'; along: Record<string, unknown> }
  /**
   * Not written: the row is no longer the version this process last wrote, or the channel's lock
   * was not free (the admission's writes stand).
   */
  | { kind: 'stale' };

/**
 * A row of a channel statement split: the channel's columns (the row as written), and the other
 * columns but its version (what a caller's part of the statement read back), `own` columns left out.
 */
function splitChannelRow(
  row: Record<string, unknown>,
  own: readonly string[] = [],
): { channel: PayerChannel; along: Record<string, unknown> } {
  return {
    channel: Object.fromEntries(CHANNEL_COLUMNS.map((name) => [name, row[name]])) as PayerChannel,
    along: Object.fromEntries(
      Object.entries(row).filter(
        ([name]) => name !== 'row_version' && !own.includes(name) && !(name in CHANNEL_COLUMN_SET),
      ),
    ),
  };
}

/**
 * Records a voucher before it is sent, with the channel's highest ceiling ever signed, in one
 * statement (with the caller's admission, when given). With `version` (the row as this process
 * last wrote it), it writes only while the row is still that version. Returns the voucher's id
 * and the row after.
 */
async function recordVoucher(
  session: ChannelSession,
  channel: PayerChannel,
  version: string | undefined,
  voucher: { callReference: string | null; base: bigint; ceiling: bigint; deposit: bigint | null; signature: string },
  admission?: VoucherAdmission,
): Promise<VoucherRecord> {
  // Without the lock yet (a version in hand), the statement takes it if it is free, and writes only then.
  const tryLock = !session.held;
  if (tryLock && version === undefined) throw new Error('a channel is read and written only under its lock');
  const statement = sql<
    Partial<PayerChannel> & { row_version: string | null; voucher_id: bigint | null; lock_got: boolean | null }
  >`
    with ${tryLock ? sql`channel_lock as (select pg_try_advisory_lock(hashtextextended(${session.key}, 0)) as got),` : sql``}
    ${admission ? sql`${admission.ctes},` : sql``}
    raised as (
      update payer_channels
      set signed_max_atomic = greatest(signed_max_atomic, ${voucher.ceiling}::numeric), last_used_at = ${new Date()}
      where channel_id = ${channel.channel_id}
        ${version === undefined ? sql`` : sql`and xmin = ${version}::xid and state = 'open'`}
        ${admission ? sql`and ${admission.admits}` : sql``}
        ${tryLock ? sql`and (select got from channel_lock)` : sql``}
      returning ${channelColumns()}, xmin::text as row_version
    ),
    voucher as (
      insert into payer_vouchers (channel_id, call_reference, base_atomic, ceiling_atomic, deposit_atomic, signature)
      select channel_id, ${voucher.callReference}, ${voucher.base}::numeric, ${voucher.ceiling}::numeric,
        ${voucher.deposit}::numeric, ${voucher.signature} from raised
      returning id
    )
    select ${admission ? sql`${admission.columns},` : sql``} voucher.id as voucher_id,
      ${channelColumns('raised')}, raised.row_version
      ${tryLock ? sql`, (select got from channel_lock) as lock_got` : sql``}
    from (select 1) as one left join raised on true left join voucher on true`;
  const { db } = session;
  const { rows } = await runPrepared(db, statement.compile(db));
  const row = rows[0];
  if (row === undefined)
    throw new Error(`payer channel ${channel.channel_id}: the voucher's statement returned no row`);
  // Taken by this statement (its session lock outlives the statement).
  if (tryLock && row.lock_got === true) session.held = true;
  const { voucher_id: voucherId, row_version: rowVersion } = row;
  const split = splitChannelRow(row, ['voucher_id', 'lock_got']);
  if (voucherId !== null && rowVersion !== null)
    return { kind: 'recorded', voucherId, channel: split.channel, version: rowVersion };
  if (admission !== undefined && !admission.admitted(split.along)) return { kind: 'refused', along: split.along };
  if (version === undefined) throw new Error(`payer channel ${channel.channel_id}: its row is gone`);
  return { kind: 'stale' };
}

/**
 * Pays one call to a target through our channel to its terms: signs, records and sends a voucher
 * (with a deposit where the balance is short), and records how the seller answered. At most two
 * vouchers are sent: the second only after a proven corrective 402.
 */
export async function payThroughChannel(
  deps: ChannelDeps,
  input: {
    call: CallRequest;
    choice: PaymentChoice;
    budget: CallBudget;
    callReference?: string;
    /** Written with the first voucher's record, before it leaves: the caller's hold of the call's cost. */
    admission?: VoucherAdmission;
    /** Written with a charged answer's record: the caller's charge for it (read back as `along`). */
    chargeAlong?: (chargedAtomic: bigint) => AnswerAlong | undefined;
  },
): Promise<ChannelCallOutcome> {
  const { choice } = input;
  const offerV2 = choice.offerV2;
  const account = deps.chains.evm.account;
  const clients = deps.chains.evm.networks.get(choice.network);
  if (offerV2 === undefined)
    return { kind: 'unsigned', details: 'a batch-settlement offer comes in x402 version 2', targetSide: true };
  if (account === undefined || clients === undefined)
    return { kind: 'unsigned', details: `no EVM wallet is configured for ${choice.network}`, targetSide: false };
  const offer = offerV2.accepted;
  const terms = channelTerms(offer);
  if (!terms.ok) return { kind: 'unsigned', details: terms.details, targetSide: true };
  const key = termsKey(choice.network, terms);
  const price = BigInt(offer.amount);
  const { decimals } = NETWORK_TABLE[choice.network];
  const cap = microToAsset(parseUsdc(deps.config.payerChannelMaxDepositUsdc), decimals);
  const method = depositMethodOf(offer, choice.network);

  return inChannelSession(deps.db, key, async (session) => {
    // The row as this process left it when its last call here ended with no voucher open: no read,
    // and the lock is taken by the voucher's own statement. It is taken once; a call that leaves it
    // as it now is puts it back.
    const lastKnown = lastKnownOf(deps.db);
    const known = lastKnown.get(key);
    lastKnown.delete(key);
    // The channel's statements on the session's connection, the one holding the lock (anything
    // else, our wallet's Permit2 approval, on the pool).
    const onSession: ChannelDeps = { ...deps, db: session.db };
    const read = async () => {
      await session.lock();
      const opened = await openChannel(session.db, choice.network, account.address, terms);
      const unresolved = await unknownVouchers(session.db, opened.channel.channel_id, opened.open);
      // After an unanswered call the chain is read first: a deposit it carried may have landed.
      const synced =
        opened.channel.synced_at === null || unresolved.some((voucher) => voucher.deposit_atomic !== null)
          ? await syncFromChain(onSession, opened.channel)
          : opened.channel;
      // Only a call under this lock makes a voucher unknown: none now, none to decide after the answer.
      return { channel: synced, unknownLeft: unresolved.length > 0 };
    };
    let { channel, unknownLeft } =
      known?.channel.payer === account.address ? { channel: known.channel, unknownLeft: false } : await read();
    // Set while the row in hand is the one this process last wrote: the voucher's statement then
    // writes only if the row is still that version, else the channel is read again.
    let version = known?.version;
    // Written once: with the first voucher's record (a correction's second voucher is the same call's).
    let admission = input.admission;

    for (let attempt = 1; ; attempt++) {
      const charged = BigInt(channel.charged_atomic);
      const balance = BigInt(channel.balance_atomic);
      const ceiling = charged + price;
      const sized = depositFor(
        { balance, ceiling, price, ...(terms.minDeposit === undefined ? {} : { minDeposit: terms.minDeposit }) },
        { multiplier: deps.config.payerChannelDepositMultiplier, cap },
      );
      if ('refused' in sized) return { kind: 'unsigned', details: sized.refused, targetSide: true };
      if (sized.deposit !== undefined && method === 'permit2') {
        // Given once per network and token, and recorded; a later deposit finds it and sends nothing.
        const approved = await ensureSpendingApproval(deps, permit2DepositChoice(choice, sized.deposit));
        if (!approved.ok)
          return {
            kind: 'unsigned',
            details: `our wallet's approval of Permit2 failed (${approved.reason}): ${approved.details}`,
            targetSide: false,
          };
      }
      const payload = await signChannelPayment(account, clients, offer, configOf(channel), {
        ceiling,
        method,
        nowSeconds: Math.floor(deps.clock.now().getTime() / 1000),
        ...(sized.deposit === undefined ? {} : { deposit: sized.deposit }),
      });
      // Recorded before it leaves: the voucher, and the channel's highest ceiling ever signed.
      // One statement (both or neither), one round trip.
      const recorded = await recordVoucher(
        session,
        channel,
        version,
        {
          callReference: input.callReference ?? null,
          base: charged,
          ceiling,
          deposit: sized.deposit ?? null,
          signature: payload.voucher.signature,
        },
        admission,
      );
      if (recorded.kind === 'refused')
        return {
          kind: 'unsigned',
          details: 'the call was not admitted; no voucher was written',
          targetSide: false,
          along: recorded.along,
        };
      admission = undefined;
      if (recorded.kind === 'stale') {
        // The row changed since this process last wrote it (another instance used the channel):
        // this voucher never leaves; the channel is read and the call signed again on what it holds.
        deps.log.info({ channelId: channel.channel_id }, 'channel changed elsewhere; read again before signing');
        ({ channel, unknownLeft } = await read());
        version = undefined;
        attempt--;
        continue;
      }
      const voucher = { id: recorded.voucherId };
      channel = recorded.channel;
      deps.log.info(
        {
          channelId: channel.channel_id,
          voucherId: String(voucher.id),
          ceiling: String(ceiling),
          deposit: sized.deposit?.toString(),
        },
        sized.deposit === undefined ? 'channel voucher signed' : 'channel deposit and voucher signed',
      );
      const built = buildTargetRequest(input.call, {
        paymentHeader: channelHeader(offerV2, choice.network, payload, voucher.id),
        paymentVersion: 2,
      }) as Ok<TargetRequest>;
      const answer: TargetAnswer = await callTarget(built.value, input.budget, deps);
      const outcome = await recordAnswer(
        onSession,
        channel,
        voucher.id,
        { charged, ceiling, deposit: sized.deposit, unknownLeft },
        answer,
        input.chargeAlong,
      );
      if (outcome.kind !== 'corrected') {
        if (outcome.after) lastKnown.set(key, outcome.after);
        else if (outcome.result.kind === 'not_charged' && sized.deposit === undefined)
          // Nothing was written to the channel since the voucher's statement.
          lastKnown.set(key, { channel, version: recorded.version });
        return outcome.result;
      }
      // The correction decided every unknown voucher.
      unknownLeft = false;
      channel = outcome.channel;
      version = outcome.version;
      if (attempt >= 2)
        return {
          kind: 'not_charged',
          response: outcome.response,
          details: 'the seller corrected the channel twice; nothing was committed',
          voucherId: voucher.id,
          channelId: channel.channel_id,
        };
    }
  });
}

/** Reads the channel's balance and claimed total from the chain into its row. */
async function syncFromChain(deps: ChannelDeps, channel: PayerChannel): Promise<PayerChannel> {
  const clients = deps.chains.evm.networks.get(channel.network as NetworkName);
  if (clients === undefined) return channel;
  const { balance, totalClaimed } = await readPayerChannel(clients, channel.channel_id as Hex);
  return deps.db
    .updateTable('payer_channels')
    .set({
      balance_atomic: balance,
      total_claimed_atomic: totalClaimed,
      // What we deposited is what the chain holds plus what was claimed out of it.
      deposited_atomic: sql`greatest(deposited_atomic, ${balance + totalClaimed}::numeric)`,
      // The seller can never have charged less than it claimed.
      charged_atomic: sql`greatest(charged_atomic, ${totalClaimed}::numeric)`,
      signed_max_atomic: sql`greatest(signed_max_atomic, ${totalClaimed}::numeric)`,
      synced_at: new Date(),
    })
    .where('channel_id', '=', channel.channel_id)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** A channel row and its version (xmin) as a statement of this process left it. */
interface KnownChannel {
  channel: PayerChannel;
  version: string;
}

/**
 * How a call ended; `after`, the channel's row as this call left it when it wrote the row last
 * (the next call of this process starts from it without reading it).
 */
type Recorded =
  | { kind: 'done'; result: ChannelCallOutcome; after?: KnownChannel }
  | { kind: 'corrected'; channel: PayerChannel; version: string; response: TargetResponse };

async function recordAnswer(
  deps: ChannelDeps,
  channel: PayerChannel,
  voucherId: bigint,
  sent: { charged: bigint; ceiling: bigint; deposit: bigint | undefined; unknownLeft: boolean },
  answer: TargetAnswer,
  chargeAlong?: (chargedAtomic: bigint) => AnswerAlong | undefined,
): Promise<Recorded> {
  const { db } = deps;
  const ids = { voucherId, channelId: channel.channel_id };
  const close = (
    state: 'charged' | 'not_charged' | 'unknown',
    details: string,
    chargedAtomic?: bigint,
    depositTx?: string,
  ) =>
    db
      .updateTable('payer_vouchers')
      .set({
        state,
        details,
        ...(chargedAtomic === undefined ? {} : { charged_atomic: chargedAtomic }),
        ...(depositTx ? { deposit_tx_hash: depositTx } : {}),
        ...(state === 'unknown' ? {} : { resolved_at: new Date() }),
      })
      .where('id', '=', voucherId)
      .execute();
  // A deposit that left may have landed whatever the answer: the chain says how much the channel holds.
  const resync = async () => (sent.deposit === undefined ? channel : syncFromChain(deps, channel));

  if (!answer.ok) {
    await close('unknown', `no answer from the target: ${answer.details}`);
    await resyncQuietly(deps, resync);
    return { kind: 'done', result: { kind: 'unknown', details: answer.details, ...ids } };
  }
  const response = answer.value;
  const receipt = sellerReceiptOf(response);
  if (response.status < 400 && receipt?.success) {
    const increment = sent.ceiling - sent.charged;
    const reported = receipt.chargedAmount ?? increment;
    const chargedAtomic = reported > increment ? increment : reported;
    // The seller accepted a voucher on our base: every earlier unknown voucher above it was never committed.
    if (sent.unknownLeft) await decideUnknown(db, channel.channel_id, sent.charged);
    // The voucher, the channel and the caller's charge in one statement (all or none), one round trip.
    const along = chargeAlong?.(chargedAtomic);
    // Its commit waits for the WAL flush only when the caller's charge asks it: should a crash of
    // the database lose it, the voucher is left `sent` (its row and a /proxy hold were flushed
    // before it left), becomes unknown at the channel's next call and is decided by the seller's
    // next word or the chain, the caller's hold with it, as after a crash of this process.
    const statement = sql<PayerChannel & { row_version: string } & Record<string, unknown>>`
      with closed as (
        update payer_vouchers
        set state = 'charged', details = ${`the seller charged ${chargedAtomic} of ${increment}`},
          charged_atomic = ${chargedAtomic}::numeric, resolved_at = ${new Date()}
          ${receipt.transaction ? sql`, deposit_tx_hash = ${receipt.transaction}` : sql``}
        where id = ${voucherId}
      ),
      updated as (
        update payer_channels
        set charged_atomic = greatest(charged_atomic, ${sent.charged + chargedAtomic}::numeric), last_used_at = ${new Date()}
          ${
            sent.deposit === undefined
              ? sql``
              : sql`, balance_atomic = balance_atomic + ${sent.deposit}::numeric,
                   deposited_atomic = deposited_atomic + ${sent.deposit}::numeric`
          }
        where channel_id = ${channel.channel_id}
        returning ${channelColumns()}, xmin::text as row_version
      )${along?.ctes ? sql`, ${along.ctes}` : sql``}
      select ${channelColumns('updated')}, updated.row_version ${along ? sql`, ${along.columns}` : sql``}
      from updated
      ${along?.flushed ? sql`` : sql`where set_config('synchronous_commit', 'off', true) is not null`}`;
    const { rows } = await runPrepared(db, statement.compile(db));
    const row = rows[0];
    if (row === undefined) throw new Error(`payer channel ${channel.channel_id}: its row is gone`);
    const { channel: written, along: alongColumns } = splitChannelRow(row);
    return {
      kind: 'done',
      result: {
        kind: 'charged',
        response,
        chargedAtomic,
        ...ids,
        ...(along === undefined ? {} : { along: alongColumns }),
      },
      ...(sent.deposit === undefined ? { after: { channel: written, version: row.row_version } } : {}),
    };
  }
  const required = paymentRequiredOf(response);
  if (required?.error !== undefined && CORRECTIVE_ERRORS.has(required.error)) {
    const account = deps.chains.evm.account;
    const clients = deps.chains.evm.networks.get(channel.network as NetworkName);
    const corrected =
      account && clients ? await checkedCorrection(account, clients, configOf(channel), required) : undefined;
    if (corrected !== undefined) {
      await close(
        'not_charged',
        `the seller answered ${required.error}; its charge of ${corrected.charged} was proven by our own voucher`,
      );
      if (sent.unknownLeft) await decideUnknown(db, channel.channel_id, corrected.charged);
      const updated = await db
        .updateTable('payer_channels')
        .set({
          charged_atomic: corrected.charged,
          ...(corrected.signedMax === undefined
            ? {}
            : { signed_max_atomic: sql`greatest(signed_max_atomic, ${corrected.signedMax}::numeric)` }),
          ...(corrected.balance === undefined ? {} : { balance_atomic: corrected.balance }),
          ...(corrected.totalClaimed === undefined ? {} : { total_claimed_atomic: corrected.totalClaimed }),
          synced_at: new Date(),
        })
        .where('channel_id', '=', channel.channel_id)
        .returningAll()
        .returning(ROW_VERSION)
        .executeTakeFirstOrThrow();
      deps.log.warn(
        { channelId: channel.channel_id, from: String(sent.charged), to: String(corrected.charged) },
        "channel base corrected from the seller's proven state",
      );
      return { kind: 'corrected', ...knownOf(updated), response };
    }
  }
  // Nothing committed: the voucher ends not charged, the channel is read again if it carried a deposit.
  const notCharged = async (recorded: string, details: string): Promise<Recorded> => {
    await close('not_charged', recorded);
    await resyncQuietly(deps, resync);
    return { kind: 'done', result: { kind: 'not_charged', response, details, ...ids } };
  };
  if (required?.error !== undefined && CORRECTIVE_ERRORS.has(required.error))
    return notCharged(
      `the seller answered ${required.error} without a voucher of ours proving it`,
      `the seller asked to correct the channel (${required.error}) but its state is not proven by our own signature`,
    );
  // The target answered without committing a charge (a failure, a refusal): the seller keeps
  // nothing of this voucher; its next voucher is signed on the same base.
  return notCharged(
    `the target answered ${response.status} without a charge`,
    `the target answered ${response.status} without a charge`,
  );
}

async function resyncQuietly(deps: ChannelDeps, resync: () => Promise<unknown>): Promise<void> {
  try {
    await resync();
  } catch (error) {
    deps.log.warn({ err: error }, 'the channel could not be read from the chain; it is read again before its next use');
    return;
  }
}

/** micro-USDC of a charge in the channel's token. */
export function chargedMicro(network: NetworkName, atomicAmount: bigint): bigint {
  return assetToMicro(atomicAmount, NETWORK_TABLE[network].decimals);
}

/**
 * Decides an unknown voucher from the chain: claimed at or above its ceiling, it was committed
 * (its whole increment, the most the seller could take). Otherwise it stays unknown.
 */
export async function voucherFromChain(
  deps: Pick<Deps, 'db' | 'chains'>,
  voucher: PayerVoucher,
): Promise<PayerVoucher> {
  if (voucher.state !== 'unknown' && voucher.state !== 'sent') return voucher;
  const channel = await deps.db
    .selectFrom('payer_channels')
    .selectAll()
    .where('channel_id', '=', voucher.channel_id)
    .executeTakeFirstOrThrow();
  const clients = deps.chains.evm.networks.get(channel.network as NetworkName);
  if (clients === undefined) return voucher;
  const { totalClaimed } = await readPayerChannel(clients, channel.channel_id as Hex);
  const ceiling = BigInt(voucher.ceiling_atomic);
  if (totalClaimed < ceiling) return voucher;
  return deps.db
    .updateTable('payer_vouchers')
    .set({
      state: 'charged',
      charged_atomic: ceiling - BigInt(voucher.base_atomic),
      resolved_at: new Date(),
      details: `the chain shows ${totalClaimed} claimed, covering this voucher's ceiling`,
    })
    .where('id', '=', voucher.id)
    .where('state', 'in', ['unknown', 'sent'])
    .returningAll()
    .executeTakeFirst()
    .then((row) => row ?? voucher);
}

export async function voucherOfProxyPayment(db: Db, reference: string): Promise<PayerVoucher | undefined> {
  return db
    .selectFrom('payer_vouchers')
    .selectAll()
    .where('call_reference', '=', reference)
    .orderBy('id', 'desc')
    .executeTakeFirst();
}

/** Runs `run` holding the lock every call on this channel's terms takes (payments/outgoing/channelIdle.ts). */
export function underPayerChannelLock<T>(db: Db, channel: PayerChannel, run: () => Promise<T>): Promise<T> {
  const terms = {
    token: channel.token,
    receiver: channel.receiver,
    receiverAuthorizer: channel.receiver_authorizer,
    withdrawDelay: channel.withdraw_delay,
  };
  return underChannelLock(db, termsKey(channel.network as NetworkName, terms), run);
}
