/**
 * Discovery of the x402 resources this service has paid (GET /discovery/resources, in the list
 * format of the x402 Bazaar: @x402/extensions' DiscoveryResourcesResponse). While it is served
 * (DISCOVERY=public), every paid call to a target is noted (origin and path only: never a query string, a body or who called), with the
 * offer we paid, whether the call succeeded and how long the paid exchange took; the list shows,
 * over the last day, each resource's latest offer per network, its share of succeeded paid calls
 * and its median latency.
 */
import { sql } from 'kysely';
import type { Db } from '../db/index';
import type { Deps } from './deps';
import type { PaymentChoice } from './x402/choose';
import type { PaymentRequirements } from './x402/types';
import type { CallRequest, TargetAnswer } from './http/index';
import type { CallBudget } from './outgoing/call';
import { sendPaidCall, type TargetPayment } from './outgoing/pay';

/** The window the list covers. */
export const DISCOVERY_WINDOW_MS = 24 * 60 * 60 * 1000;
export const DISCOVERY_MAX_LIMIT = 100;
/** The most resources one listing reads before it filters and pages. */
const DISCOVERY_SCAN_LIMIT = 1000;

/** A URL as discovery shows it: origin and path, nothing else. */
function resourceOf(url: string): string | undefined {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return undefined;
  }
}

/**
 * Notes a paid call to a target, while the list is served (DISCOVERY=public; nothing else reads
 * the notes, and a paid call then writes one row less). Never fails the call it describes: a
 * failed write is logged. `succeeded`: the target answered below 400 after our payment.
 */
async function notePaidCall(
  deps: Pick<Deps, 'db' | 'log' | 'config'>,
  call: { url: string; method: unknown; choice: PaymentChoice; status: number | undefined; startedAt: number },
): Promise<void> {
  if (deps.config.discovery !== 'public') return;
  const resource = resourceOf(call.url);
  if (resource === undefined) return;
  const offer: PaymentRequirements = { ...call.choice.requirements, resource };
  try {
    await deps.db
      .insertInto('paid_resource_calls')
      .values({
        resource,
        method: String(call.method).toUpperCase().slice(0, 16),
        network: call.choice.requirements.network,
        offer: JSON.stringify(offer),
        succeeded: call.status !== undefined && call.status < 400,
        latency_ms: Math.max(0, Math.round(performance.now() - call.startedAt)),
      })
      .execute();
  } catch (error) {
    deps.log.warn({ err: error }, 'a paid call could not be noted for discovery');
  }
}

/** Our paid call to the target (sendPaidCall), noted for discovery with how it went. */
export async function sendNotedPaidCall(
  deps: Pick<Deps, 'db' | 'log' | 'config' | 'resolver' | 'connections'>,
  call: CallRequest,
  payment: Pick<TargetPayment, 'header' | 'x402Version'>,
  choice: PaymentChoice,
  budget: CallBudget,
): Promise<TargetAnswer> {
  const startedAt = performance.now();
  const answer = await sendPaidCall(call, payment, budget, deps);
  await notePaidCall(deps, {
    url: call.api_url,
    method: call.method,
    choice,
    startedAt,
    status: answer.ok ? answer.value.status : undefined,
  });
  return answer;
}

export interface DiscoveredResource {
  resource: string;
  method: string;
  accepts: PaymentRequirements[];
  lastUpdated: Date;
  description: string | undefined;
  mimeType: string | undefined;
  paidCalls: number;
  succeeded: number;
  p50LatencyMs: number;
}

export async function discoveredResources(
  db: Db,
  {
    now,
    limit,
    offset,
    text,
    maxAmountMicroUsdc,
  }: { now: Date; limit: number; offset: number; text?: string | undefined; maxAmountMicroUsdc?: bigint | undefined },
): Promise<{ items: DiscoveredResource[]; total: number }> {
  const since = new Date(now.getTime() - DISCOVERY_WINDOW_MS);
  const { rows } = await sql<{
    resource: string;
    method: string;
    paid_calls: string;
    succeeded: string;
    p50_latency_ms: number;
    last_updated: Date;
    offers: PaymentRequirements[];
    total: string;
  }>`
    with recent as (
      select * from paid_resource_calls where created_at >= ${since}
    ),
    latest as (
      select distinct on (resource, method, network) resource, method, offer
      from recent order by resource, method, network, created_at desc, id desc
    ),
    stats as (
      select resource, method, count(*) as paid_calls, count(*) filter (where succeeded) as succeeded,
        percentile_cont(0.5) within group (order by latency_ms) as p50_latency_ms,
        max(created_at) as last_updated
      from recent group by resource, method
    )
    select s.resource, s.method, s.paid_calls, s.succeeded, s.p50_latency_ms, s.last_updated,
      (select jsonb_agg(l.offer) from latest l where l.resource = s.resource and l.method = s.method) as offers,
      count(*) over () as total
    from stats s
    order by s.last_updated desc, s.resource, s.method
    limit ${DISCOVERY_SCAN_LIMIT}`.execute(db);
  const items = rows.map((row) => {
    const [first] = row.offers;
    return {
      resource: row.resource,
      method: row.method,
      accepts: row.offers,
      lastUpdated: new Date(row.last_updated),
      description: first?.description,
      mimeType: first?.mimeType,
      paidCalls: Number(row.paid_calls),
      succeeded: Number(row.succeeded),
      p50LatencyMs: Math.round(row.p50_latency_ms),
    };
  });
  const needle = text?.toLowerCase();
  const matching = items.filter(
    (item) =>
      (needle === undefined ||
        item.resource.toLowerCase().includes(needle) ||
        (item.description ?? '').toLowerCase().includes(needle)) &&
      (maxAmountMicroUsdc === undefined ||
        item.accepts.some(
          (offer) => /^[0-9]+$/.test(offer.maxAmountRequired) && BigInt(offer.maxAmountRequired) <= maxAmountMicroUsdc,
        )),
  );
  return { items: matching.slice(offset, offset + limit), total: matching.length };
}
