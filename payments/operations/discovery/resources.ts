/**
 * Discovery of the x402 resources this service has paid (GET /discovery/resources, in the list
 * format of the x402 Bazaar: @x402/extensions' DiscoveryResourcesResponse). While it is served
 * (DISCOVERY=public), every paid call to a target is noted (origin and path only: never a query string, a body or who called), with the
 * offer we paid, whether the call succeeded and how long the paid exchange took; the list shows,
 * over the last day, one entry per resource (whatever methods it was called with, as the Bazaar keys
 * a resource by its URL) with its methods, its latest offer per network, its share of succeeded paid
 * calls and its median latency. It is filtered as the Bazaar client of @x402/extensions asks
 * (`type`, `payTo`, `scheme`, `network`, `extensions`), and by text and price.
 */
import { sql } from 'kysely';
import type { Db } from '../../../db/index';
import type { Deps } from '../../deps';
import type { PaymentChoice } from '../../x402/choose';
import type { PaymentRequirements } from '../../x402/types';
import type { CallRequest, TargetAnswer } from '../../basics/http/index';
import type { CallBudget } from '../../outgoing/call';
import { canonicalNetwork } from '../../basics/networkTable';
import { sendPaidCall, type TargetPayment } from '../../outgoing/pay';

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
  /** The methods it was paid with, the most recently used first. */
  methods: string[];
  accepts: PaymentRequirements[];
  lastUpdated: Date;
  description: string | undefined;
  mimeType: string | undefined;
  paidCalls: number;
  succeeded: number;
  p50LatencyMs: number;
}

/** What a listing keeps; every filter given must hold. */
export interface DiscoveryFilters {
  /** In the resource's URL or description, case-insensitive. */
  text?: string | undefined;
  /** An offer at most this price. */
  maxAmountMicroUsdc?: bigint | undefined;
  /** An offer paying to this address (EVM addresses in any case). */
  payTo?: string | undefined;
  /** An offer of this scheme. */
  scheme?: string | undefined;
  /** An offer on this network, by our name, an alias or its CAIP-2 id. */
  network?: string | undefined;
  /** Extension keys the entry must carry (the Bazaar client's `extensions`, comma-separated there). */
  extensions?: string[] | undefined;
}

/** The extension keys of every entry of the list (`router`: how its paid calls went). */
export const DISCOVERY_EXTENSIONS: readonly string[] = ['router'];

function sameAddress(a: string, b: string): boolean {
  return /^0x[0-9a-fA-F]{40}$/.test(a) ? a.toLowerCase() === b.toLowerCase() : a === b;
}

/** Whether a resource passes the filters; an unknown network name matches nothing. */
function matches(item: DiscoveredResource, filters: DiscoveryFilters): boolean {
  const needle = filters.text?.toLowerCase();
  if (
    needle !== undefined &&
    !item.resource.toLowerCase().includes(needle) &&
    !(item.description ?? '').toLowerCase().includes(needle)
  )
    return false;
  if (filters.extensions?.some((key) => !DISCOVERY_EXTENSIONS.includes(key))) return false;
  const network = filters.network === undefined ? undefined : (canonicalNetwork(filters.network) ?? null);
  if (network === null) return false;
  const { maxAmountMicroUsdc, payTo, scheme } = filters;
  // One offer must meet every condition on offers, as a client would pay that one.
  return item.accepts.some(
    (offer) =>
      (maxAmountMicroUsdc === undefined ||
        (/^[0-9]+$/.test(offer.maxAmountRequired) && BigInt(offer.maxAmountRequired) <= maxAmountMicroUsdc)) &&
      (payTo === undefined || sameAddress(offer.payTo, payTo)) &&
      (scheme === undefined || offer.scheme === scheme) &&
      (network === undefined || canonicalNetwork(offer.network) === network),
  );
}

export async function discoveredResources(
  db: Db,
  { now, limit, offset, ...filters }: { now: Date; limit: number; offset: number } & DiscoveryFilters,
): Promise<{ items: DiscoveredResource[]; total: number }> {
  const since = new Date(now.getTime() - DISCOVERY_WINDOW_MS);
  const { rows } = await sql<{
    resource: string;
    methods: string[];
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
      select distinct on (resource, network) resource, network, offer
      from recent order by resource, network, created_at desc, id desc
    ),
    methods as (
      select resource, array_agg(method order by last_used desc, method) as methods
      from (select resource, method, max(created_at) as last_used from recent group by resource, method) used
      group by resource
    ),
    stats as (
      select resource, count(*) as paid_calls, count(*) filter (where succeeded) as succeeded,
        percentile_cont(0.5) within group (order by latency_ms) as p50_latency_ms,
        max(created_at) as last_updated
      from recent group by resource
    )
    select s.resource, m.methods, s.paid_calls, s.succeeded, s.p50_latency_ms, s.last_updated,
      (select jsonb_agg(l.offer order by l.network) from latest l where l.resource = s.resource) as offers,
      count(*) over () as total
    from stats s join methods m on m.resource = s.resource
    order by s.last_updated desc, s.resource
    limit ${DISCOVERY_SCAN_LIMIT}`.execute(db);
  const items = rows.map((row) => {
    const [first] = row.offers;
    return {
      resource: row.resource,
      methods: row.methods,
      accepts: row.offers,
      lastUpdated: new Date(row.last_updated),
      description: first?.description,
      mimeType: first?.mimeType,
      paidCalls: Number(row.paid_calls),
      succeeded: Number(row.succeeded),
      p50LatencyMs: Math.round(row.p50_latency_ms),
    };
  });
  const matching = items.filter((item) => matches(item, filters));
  return { items: matching.slice(offset, offset + limit), total: matching.length };
}
