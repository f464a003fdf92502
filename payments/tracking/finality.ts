/**
 * Settled is not final (docs/decisions.md, "What is final when"). Every transaction a payment rests
 * on (a client's settlement, our payment to a target, a refund) gets a finality watch once its flow
 * records it settled (db/migrations/2026_11_29_0017_finality_watches.ts opens it). The
 * `finality_follow` job looks at every watch that is due, a batch at a time
 * (db/migrations/2026_11_30_0024_finality_follow.ts), and follows each through its network's family: final at the network's rule;
 * dropped by a reorg, sent again while it can land; lost when it cannot, with the amount at risk on
 * the watch, an error log line and the payments_lost_to_reorg metric, and a /proxy charge's credits
 * given back. Answers to clients never wait for any of this.
 */
import { sql, type Selectable } from 'kysely';
import type { Db } from '../../db/index';
import type { FinalityLeg, FinalityWatchesTable } from '../../db/schema';
import { familyOf } from '../chains/registry';
import type { FinalityReading, WatchedTransfer } from '../chains/family';
import { finalityRuleOf } from '../basics/config';
import type { Deps } from '../deps';
import { moveFinalityWatch, moveFinalityWatchesToFinal, type FinalMove } from './finalityStates';
import { DEFAULT_MAX_ATTEMPTS } from '../basics/jobs';
import { canonicalNetwork, NETWORK_TABLE } from '../basics/networkTable';

export type FinalityWatch = Selectable<FinalityWatchesTable>;

/** Told of every transfer found lost (the service's metrics). */
export type LossObserver = (leg: FinalityLeg, network: string) => void;

export type FinalityDeps = Pick<
  Deps,
  'db' | 'config' | 'chains' | 'submissions' | 'clock' | 'log' | 'paymentBounds'
> & {
  onPaymentLost?: LossObserver;
};

/** The first look soon after settling; later looks further apart, at most this far. */
export const MIN_FINALITY_RECHECK_MS = 1_000;
export const MAX_FINALITY_RECHECK_MS = 30_000;
/** A chain that cannot be read is looked at again after this. */
export const UNREADABLE_FINALITY_RECHECK_MS = 15_000;

/** A pending transfer nothing can change for a while (its reading's quietMs) is looked at again within this at the most. */
export const MAX_QUIET_FINALITY_LOOK_MS = 600_000;

/**
 * A look at a transfer that could still be sent again falls at least this long before it no longer
 * could (its authorization's validBefore): a drop found then is sent again in time, even when the
 * look itself runs late on a busy machine.
 */
export const FINALITY_DEADLINE_MARGIN_MS = 10_000;

/**
 * Looks closer together while a transfer is young, further apart as it ages: a quarter of its age,
 * bounded. When its reading says no look can change anything for `quietMs` (its block cannot be
 * final before, and a drop could no longer be sent again), the next look is then, within
 * MAX_QUIET_FINALITY_LOOK_MS. While a drop could still be sent again (until `sendableUntilMs`), a
 * look falls FINALITY_DEADLINE_MARGIN_MS before that moment, and the next one just after it, which
 * finds the transfer final or, dropped, lost.
 */
export function nextFinalityLook(now: Date, createdAt: Date, quietMs?: number, sendableUntilMs?: number): Date {
  const age = now.getTime() - createdAt.getTime();
  const wait = Math.min(MAX_FINALITY_RECHECK_MS, Math.max(MIN_FINALITY_RECHECK_MS, Math.floor(age / 4)));
  const quiet = quietMs === undefined ? 0 : Math.min(MAX_QUIET_FINALITY_LOOK_MS, quietMs);
  return beforeDeadline(now, now.getTime() + Math.max(wait, quiet), sendableUntilMs);
}

/**
 * A look planned at `at` (ms), brought forward to FINALITY_DEADLINE_MARGIN_MS before
 * `sendableUntilMs` while that is ahead, else to a second after it while that is ahead; never
 * sooner than a second from now.
 */
function beforeDeadline(now: Date, at: number, sendableUntilMs?: number): Date {
  if (sendableUntilMs === undefined || now.getTime() >= sendableUntilMs) return new Date(at);
  const lastChance = sendableUntilMs - FINALITY_DEADLINE_MARGIN_MS;
  const deadline = now.getTime() < lastChance ? lastChance : sendableUntilMs + MIN_FINALITY_RECHECK_MS;
  return new Date(Math.max(now.getTime() + MIN_FINALITY_RECHECK_MS, Math.min(at, deadline)));
}

/**
 * The look after one that could not read the chain (or failed): UNREADABLE_FINALITY_RECHECK_MS
 * later, or sooner while the watched EVM authorization could still be sent again (its validBefore,
 * read from the watch), so that a failed look does not push the next past it.
 */
function nextUnreadableLook(now: Date, transfer: unknown): Date {
  const validBefore = (transfer as { payment?: { payload?: { authorization?: { validBefore?: unknown } } } } | null)
    ?.payment?.payload?.authorization?.validBefore;
  const until =
    typeof validBefore === 'string' && /^[0-9]{1,15}$/.test(validBefore) ? Number(validBefore) * 1000 : undefined;
  return beforeDeadline(now, now.getTime() + UNREADABLE_FINALITY_RECHECK_MS, until);
}

/** Whether the watch is past its network's bound: a sweep then reconciles it (and operators hear of it). */
function pastWatchBound(
  watch: Pick<FinalityWatch, 'network' | 'created_at'>,
  now: Date,
  deps: Pick<Deps, 'config'>,
): boolean {
  const network = canonicalNetwork(watch.network);
  if (network === undefined) return true;
  const { watchSeconds } = finalityRuleOf(deps.config.networks, network);
  return now.getTime() - watch.created_at.getTime() >= watchSeconds * 1000;
}

/** The key of the one job that follows every due watch (db/migrations/..._finality_follow). */
export const FINALITY_FOLLOW_KEY = 'finality_follow';
/** Watches looked at per run of the follow job; a run that found a full batch runs again at once. */
export const FINALITY_FOLLOW_BATCH = 200;
/** Watches read from their chains at the same time within a run. */
const FOLLOW_CONCURRENCY = 8;

/**
 * The follow job's priority in graphile-worker (lower runs first; every other job has 0): a look
 * that can still send a dropped transfer again is never queued behind refunds, watches or sweeps.
 */
export const FINALITY_FOLLOW_PRIORITY = -10;

/**
 * Makes sure the follow job runs by `runAt` (at once without it): nothing when one waits to run by
 * then, else the waiting job is moved to `runAt` (or one is queued). Never later: a job queued for a
 * later look (a quiet one, minutes away) would otherwise hold back the first look of a watch just
 * opened. The job's own queue runs it one run at a time, so no watch is looked at by two runs at
 * once. Called once per run of the job and by the sweep, never per payment (the trigger that opens
 * a watch does the same in SQL: db/migrations/..._finality_follow_first).
 */
export async function queueFinalityFollow(db: Db, runAt?: Date): Promise<void> {
  const at = sql<Date>`greatest(${(runAt ?? new Date(0)).toISOString()}::timestamptz, now())`;
  await sql`
    select graphile_worker.add_job(
      identifier => 'finality_follow',
      payload => '{}'::json,
      queue_name => ${FINALITY_FOLLOW_KEY}::text,
      run_at => ${at},
      max_attempts => ${DEFAULT_MAX_ATTEMPTS}::int,
      job_key => ${FINALITY_FOLLOW_KEY}::text,
      priority => ${FINALITY_FOLLOW_PRIORITY}::int,
      job_key_mode => 'replace'
    )
    where not exists (
      select 1 from graphile_worker.jobs
      where key = ${FINALITY_FOLLOW_KEY} and locked_at is null and attempts < max_attempts and run_at <= ${at}
    )`.execute(db);
}

/** A pending watch's look may be this late before the sweep queues the follow job again. */
export const FINALITY_LOOK_GRACE_MS = 10_000;

/** Whether a pending watch is past its look by more than FINALITY_LOOK_GRACE_MS (by the database's clock). */
export async function lateFinalityLook(db: Db): Promise<boolean> {
  const late = await db
    .selectFrom('finality_watches')
    .select('id')
    .where('finality', '=', 'pending')
    .where('look_at', '<', sql<Date>`now() - ${`${FINALITY_LOOK_GRACE_MS} milliseconds`}::interval`)
    .limit(1)
    .executeTakeFirst();
  return late !== undefined;
}

/** Watches still pending past their network's bound, oldest first (the sweep's share). */
export async function overdueFinalityWatches(db: Db, deps: Pick<Deps, 'config'>, now: Date, limit: number) {
  // The shortest bound of any network is the cut: the rows are filtered by their own bound after.
  const shortest = Math.min(...Object.values(NETWORK_TABLE).map((row) => row.finality.watchSeconds));
  const rows = await db
    .selectFrom('finality_watches')
    .select(['id', 'network', 'created_at'])
    .where('finality', '=', 'pending')
    .where('created_at', '<', new Date(now.getTime() - shortest * 1000))
    .orderBy('created_at')
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.filter((row) => pastWatchBound(row, now, deps));
}

/**
 * What the watches of one run of the follow job share: readings every watch can use (a network's
 * head, read once), and the watches found final, written together at the end of the run.
 */
interface LookRun {
  shared: <T>(key: string, read: () => Promise<T>) => Promise<T>;
  finals: Array<{ watch: FinalityWatch; move: FinalMove }>;
}

function lookRun(): LookRun {
  const readings = new Map<string, Promise<unknown>>();
  return {
    shared<T>(key: string, read: () => Promise<T>): Promise<T> {
      let reading = readings.get(key) as Promise<T> | undefined;
      if (reading === undefined) {
        reading = read();
        readings.set(key, reading);
      }
      return reading;
    },
    finals: [],
  };
}

/**
 * One look at a pending watch: the family reads the chain (and sends a dropped transfer again);
 * the watch moves as the reading says (found final: with the run's other finals, at its end).
 * Returns when to look again, or undefined once the watch is final or lost. Safe to repeat: every
 * write is a guarded move from pending.
 */
async function followWatch(deps: FinalityDeps, watch: FinalityWatch, run: LookRun): Promise<Date | undefined> {
  const { db, log } = deps;
  const id = watch.id;
  const now = deps.clock.now();
  const network = canonicalNetwork(watch.network);
  if (network === undefined || deps.chains.network(network) === undefined) {
    log.warn({ finalityWatchId: String(id), network: watch.network }, 'finality watch on a network not enabled here');
    return new Date(now.getTime() + UNREADABLE_FINALITY_RECHECK_MS);
  }
  let resends = watch.resends;
  const transfer: WatchedTransfer = {
    network,
    txHash: watch.tx_hash,
    transfer: watch.transfer ?? {},
    async storeTransaction(hash) {
      resends += 1;
      const moved = await moveFinalityWatch(db, id, 'pending', { tx_hash: hash, resends, block_number: null });
      return moved !== undefined;
    },
    shared: run.shared,
  };
  const reading = await familyOf(network).followToFinality(
    transfer,
    finalityRuleOf(deps.config.networks, network),
    deps,
  );
  return concludeReading(deps, watch, reading, now, run);
}

async function concludeReading(
  deps: FinalityDeps,
  watch: FinalityWatch,
  reading: FinalityReading,
  now: Date,
  run: LookRun,
): Promise<Date | undefined> {
  const { db } = deps;
  const log = deps.log.child({
    finalityWatchId: String(watch.id),
    leg: watch.leg,
    network: watch.network,
    subject: watch.subject,
  });
  switch (reading.state) {
    case 'final': {
      run.finals.push({
        watch,
        move: {
          id: watch.id,
          tx_hash: reading.txHash,
          block_number: reading.blockNumber,
          details: reading.details,
          final_at: now,
        },
      });
      return undefined;
    }
    case 'pending': {
      // The same transaction sent again (its signed bytes, or signed again to the same signature) is counted here.
      const resentAsIs = reading.resent === true && reading.txHash === watch.tx_hash;
      // Once held at the rule, the details say so (one write; they name no depth that grows).
      const nowHeld = reading.held === true && reading.details !== watch.details;
      if (
        resentAsIs ||
        nowHeld ||
        reading.txHash !== watch.tx_hash ||
        reading.blockNumber !== (watch.block_number ?? undefined)
      )
        await moveFinalityWatch(db, watch.id, 'pending', {
          tx_hash: reading.txHash,
          block_number: reading.blockNumber ?? null,
          details: reading.details,
          ...(resentAsIs ? { resends: watch.resends + 1 } : {}),
        });
      if (reading.resent) log.warn({ txHash: reading.txHash, details: reading.details }, 'dropped payment sent again');
      if (pastWatchBound(watch, now, deps))
        log.warn({ txHash: reading.txHash, details: reading.details }, 'payment not final after its watch bound');
      return nextFinalityLook(
        now,
        watch.created_at,
        reading.quietMs,
        reading.sendableUntil === undefined ? undefined : Number(reading.sendableUntil) * 1000,
      );
    }
    case 'lost': {
      const moved = await db.transaction().execute(async (tx) => {
        const row = await moveFinalityWatch(tx, watch.id, 'lost', { details: `${reading.reason}: ${reading.details}` });
        if (row?.proxy_payment_id !== null && row?.proxy_payment_id !== undefined)
          await restoreProxyCredits(tx, row.proxy_payment_id);
        return row;
      });
      if (moved) {
        log.error(
          {
            txHash: watch.tx_hash,
            reason: reading.reason,
            details: reading.details,
            amountAtRiskMicroUsdc: String(watch.amount_micro_usdc),
            payer: watch.payer,
          },
          'payment lost to a reorg: it can no longer land',
        );
        deps.onPaymentLost?.(watch.leg, watch.network);
      }
      return undefined;
    }
    case 'unknown':
      log.warn({ details: reading.details }, 'could not follow a payment to finality; will look again');
      return nextUnreadableLook(now, watch.transfer);
  }
}

/**
 * Until when a watched EVM authorization could be sent again (its validBefore, unix seconds), null
 * when it no longer can or the watch holds none (our own signed bytes, a Solana transaction).
 */
const sendableUntil = sql<string | null>`(
  case when transfer #>> '{payment,payload,authorization,validBefore}' ~ '^[0-9]{1,15}$'
    and (transfer #>> '{payment,payload,authorization,validBefore}')::bigint > extract(epoch from now())
  then (transfer #>> '{payment,payload,authorization,validBefore}')::bigint end)`;

/**
 * One run of the follow job: every pending watch whose look is due, those that can still be sent
 * again first (the soonest to expire first), then the oldest look first, up to
 * FINALITY_FOLLOW_BATCH, each looked at once (a few at a time); each still pending gets its next
 * look written. A look that fails is tried again later and never stops the others. Returns when
 * the next watch is due, or undefined when none is pending.
 */
export async function followDueFinalityWatches(deps: FinalityDeps): Promise<Date | undefined> {
  const { db } = deps;
  const due = await db
    .selectFrom('finality_watches')
    .selectAll()
    .where('finality', '=', 'pending')
    .where('look_at', '<=', sql<Date>`now()`)
    // Transfers that can still be sent again first, the soonest to expire first; then by look.
    .orderBy(sql`${sendableUntil} nulls last`)
    .orderBy('look_at')
    .limit(FINALITY_FOLLOW_BATCH)
    .execute();
  const next: Array<[bigint, Date]> = [];
  const run = lookRun();
  const queue = [...due];
  const lookAtEach = async () => {
    for (let watch = queue.shift(); watch !== undefined; watch = queue.shift()) {
      try {
        const at = await followWatch(deps, watch, run);
        if (at) next.push([watch.id, at]);
      } catch (error) {
        deps.log.error(
          { err: error, finalityWatchId: String(watch.id) },
          'finality watch: the look failed; will look again',
        );
        next.push([watch.id, nextUnreadableLook(deps.clock.now(), watch.transfer)]);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(FOLLOW_CONCURRENCY, due.length) }, lookAtEach));
  if (next.length > 0) await setNextLooks(db, next);
  await writeFinals(deps, run.finals);
  if (due.length >= FINALITY_FOLLOW_BATCH) return deps.clock.now();
  const soonest = await db
    .selectFrom('finality_watches')
    .select((eb) => eb.fn.min<Date>('look_at').as('at'))
    .where('finality', '=', 'pending')
    .executeTakeFirst();
  return soonest?.at ?? undefined;
}

/** The watches a run found final, in one statement; each one that moved is logged. */
async function writeFinals(deps: FinalityDeps, finals: LookRun['finals']): Promise<void> {
  if (finals.length === 0) return;
  const moved = new Set(
    await moveFinalityWatchesToFinal(
      deps.db,
      finals.map((final) => final.move),
    ),
  );
  for (const { watch, move } of finals) {
    if (!moved.has(watch.id)) continue;
    deps.log.info(
      {
        finalityWatchId: String(watch.id),
        leg: watch.leg,
        network: watch.network,
        subject: watch.subject,
        txHash: move.tx_hash,
        blockNumber: String(move.block_number),
      },
      'payment final on chain',
    );
  }
}

/** The next look of each watch still pending, in one statement. */
async function setNextLooks(db: Db, looks: Array<[bigint, Date]>): Promise<void> {
  await sql`
    update finality_watches w set look_at = v.at
    from unnest(${looks.map(([id]) => String(id))}::bigint[], ${looks.map(([, at]) => at.toISOString())}::timestamptz[]) as v(id, at)
    where w.id = v.id and w.finality = 'pending'`.execute(db);
}

type DbOrTx = Parameters<typeof moveFinalityWatch>[0];

/** The charge entry of a proxy payment's credits says whether its payment is final. */
async function markProxyCharge(tx: DbOrTx, proxyPaymentId: bigint, finality: 'final' | 'lost') {
  await sql`
    update credit_ledger l set finality = ${finality}
    from proxy_payments p
    where p.id = ${proxyPaymentId} and l.reference = p.reference and l.kind = 'charge'`.execute(tx);
}

/**
 * Our payment to the target never landed: the credits charged for it go back to the organisation,
 * once (the watch moved to lost in the same transaction), with a refund entry in the ledger.
 */
async function restoreProxyCredits(tx: DbOrTx, proxyPaymentId: bigint) {
  await markProxyCharge(tx, proxyPaymentId, 'lost');
  await sql`
    with p as (select * from proxy_payments where id = ${proxyPaymentId} and state = 'charged'),
    o as (update organisations set credit_balance = credit_balance + p.credits from p where organisations.id = p.organisation_id)
    insert into credit_ledger (organisation_id, account_id, api_key_id, kind, amount_credits, reference)
      select p.organisation_id, p.account_id, p.api_key_id, 'refund', p.credits, p.reference from p`.execute(tx);
}
