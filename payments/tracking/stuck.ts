/**
 * Records stuck past their bound, counted for the gauge prs_states_stuck (and its alert): each table
 * whose rows a job must move on, with the bound past which a row still open means a job is not
 * doing its work. Each count reads a partial index of open rows; the finality count stops at
 * STUCK_COUNT_LIMIT.
 *
 * - relay_transactions: a relay still received, settling, settled or refund_pending an hour after
 *   its last move (a relay ends within RELAY_ABANDONED_AFTER_MS and a refund within minutes);
 * - proxy_payments: a payment still reserved or signed an hour past PROXY_PAYMENT_WINDOW_SECONDS
 *   (its authorization can no longer land after its window);
 * - refunds: a refund pending an hour after its last move;
 * - finality_watches: a settled transfer not final after its network's watch bound.
 */
import { sql } from 'kysely';
import type { Db } from '../../db/index';
import type { Config } from '../basics/config';
import { overdueFinalityWatches } from './finality';

export const STUCK_TABLES = ['relay_transactions', 'proxy_payments', 'refunds', 'finality_watches'] as const;
export type StuckTable = (typeof STUCK_TABLES)[number];

const HOUR_MS = 3_600_000;
export const STUCK_COUNT_LIMIT = 1000;

export async function stuckStates(db: Db, config: Config, now: Date): Promise<Record<StuckTable, number>> {
  const hourAgo = new Date(now.getTime() - HOUR_MS);
  const proxyCut = new Date(now.getTime() - HOUR_MS - config.proxyPaymentWindowSeconds * 1000);
  const count = async (query: Promise<{ rows: { count: string }[] }>) => Number((await query).rows[0]?.count ?? 0);
  const [relay, proxy, refunds, finality] = await Promise.all([
    count(
      sql<{ count: string }>`
        select count(*)::text as count from relay_transactions
        where mode = 'relay' and state in ('received', 'settling', 'settled', 'refund_pending')
          and updated_at < ${hourAgo}
      `.execute(db),
    ),
    count(
      sql<{ count: string }>`
        select count(*)::text as count from proxy_payments
        where state in ('reserved', 'signed') and created_at < ${proxyCut}
      `.execute(db),
    ),
    count(
      sql<{ count: string }>`
        select count(*)::text as count from refunds where status = 'pending' and updated_at < ${hourAgo}
      `.execute(db),
    ),
    overdueFinalityWatches(db, { config }, now, STUCK_COUNT_LIMIT).then((rows) => rows.length),
  ]);
  return { relay_transactions: relay, proxy_payments: proxy, refunds, finality_watches: finality };
}
