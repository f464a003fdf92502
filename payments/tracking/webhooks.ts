/**
 * Asynchronous operation records that clients poll with GET /webhooks/{id} (interface 3.3-3.5,
 * 2.12). The stored status is ours; the response status is what the interface shows.
 */
import { sql } from 'kysely';
import type { Db, Tx } from '../../db/index';
import type { Finality, StoredWebhookStatus, WebhookKind } from '../../db/schema';
import { allowedFrom } from '../basics/states';
import { WEBHOOK_MOVES } from './webhookStates';

export type WebhookResponseStatus =
  'pending' | 'success' | 'refund_confirmed' | 'success_refunded' | 'no_refund_needed' | 'failed';

export type FailureStatus = Extract<
  StoredWebhookStatus,
  'payment_failed' | 'upstream_error' | 'internal_error' | 'rate_limited' | 'validation_failed' | 'refund_failed'
>;

const FAILURE_STATUSES = new Set<StoredWebhookStatus>([
  'payment_failed',
  'upstream_error',
  'internal_error',
  'rate_limited',
  'validation_failed',
  'refund_failed',
]);

function responseStatusOf(stored: StoredWebhookStatus): WebhookResponseStatus {
  if (stored === 'async_processing') return 'pending';
  if (FAILURE_STATUSES.has(stored)) return 'failed';
  return stored as WebhookResponseStatus;
}

export interface WebhookView {
  status: WebhookResponseStatus;
  txHash?: string;
  network?: string;
  method?: 'facilitator' | 'direct';
  relayTxId?: number;
  facilitatorUrl?: string;
  message?: string;
  error?: string;
  errorType?: FailureStatus;
  /** Whether the record's on-chain payments are final (payments/tracking/finality.ts); absent while none is watched. */
  finality?: Finality;
}

/**
 * The finality of a record's watched transactions taken together: lost if any is lost, pending if
 * any is not final yet, final once all are. A relay record covers its transaction's legs (the
 * client's settlement, the payment to the target, the refund), a proxy record its payment.
 */
async function finalityOf(db: Db, id: string, relayTxId: bigint | null): Promise<Finality | undefined> {
  const rows = await db
    .selectFrom('finality_watches')
    .select('finality')
    .where((eb) =>
      eb.or([
        ...(relayTxId === null ? [] : [eb('relay_transaction_id', '=', relayTxId)]),
        eb('proxy_payment_id', 'in', eb.selectFrom('proxy_payments').select('id').where('webhook_id', '=', id)),
      ]),
    )
    .execute();
  if (rows.length === 0) return undefined;
  if (rows.some((row) => row.finality === 'lost')) return 'lost';
  return rows.some((row) => row.finality === 'pending') ? 'pending' : 'final';
}

export async function findWebhook(db: Db, id: string): Promise<WebhookView | undefined> {
  const row = await db.selectFrom('webhooks').selectAll().where('id', '=', id).executeTakeFirst();
  if (!row) return undefined;
  const status = responseStatusOf(row.status);
  const view: WebhookView = { status };
  if (row.tx_hash !== null) view.txHash = row.tx_hash;
  if (row.network !== null) view.network = row.network;
  if (row.method !== null) view.method = row.method;
  if (row.relay_tx_id !== null) view.relayTxId = Number(row.relay_tx_id);
  if (row.facilitator_url !== null) view.facilitatorUrl = row.facilitator_url;
  if (row.message !== null) view.message = row.message;
  if (status === 'failed') {
    view.error = row.error ?? row.message ?? row.status;
    view.errorType = row.status as FailureStatus;
  }
  const finality = await finalityOf(db, id, row.relay_tx_id);
  if (finality !== undefined) view.finality = finality;
  return view;
}

/** Opens a record in flight (async_processing); its id is what the client polls. */
export async function openWebhook(
  tx: Tx,
  record: { kind: WebhookKind; network?: string; message: string; relayTxId?: bigint },
): Promise<string> {
  const row = await tx
    .insertInto('webhooks')
    .values({
      kind: record.kind,
      status: 'async_processing',
      network: record.network ?? null,
      message: record.message,
      relay_tx_id: record.relayTxId ?? null,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export interface WebhookOutcome {
  status: Exclude<StoredWebhookStatus, 'async_processing'>;
  txHash?: string;
  network?: string;
  message: string;
  error?: string;
  /** Relay refunds: how the refund was executed, and the facilitator used, if any. */
  method?: 'facilitator' | 'direct';
  facilitatorUrl?: string;
}

/**
 * Moves a record in flight to its terminal status: the one write of a record's status, from the
 * statuses WEBHOOK_MOVES allows (./webhookStates.ts). Only a record still in flight moves, so a
 * job that runs twice cannot overwrite the first outcome; returns whether this call moved it.
 */
export async function completeWebhook(tx: Tx, id: string, outcome: WebhookOutcome): Promise<boolean> {
  const from = allowedFrom<StoredWebhookStatus>('webhook record', WEBHOOK_MOVES, outcome.status);
  const result = await tx
    .updateTable('webhooks')
    .set({
      status: outcome.status,
      tx_hash: outcome.txHash ?? null,
      ...(outcome.network === undefined ? {} : { network: outcome.network }),
      message: outcome.message,
      error: outcome.error ?? null,
      ...(outcome.method === undefined ? {} : { method: outcome.method }),
      ...(outcome.facilitatorUrl === undefined ? {} : { facilitator_url: outcome.facilitatorUrl }),
      updated_at: sql`now()`,
    })
    .where('id', '=', id)
    .where('status', 'in', from)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Terminal records are kept this long; records still in flight are never pruned. */
export const WEBHOOK_RETENTION_DAYS = 30;

export async function pruneWebhooks(db: Db, now: Date): Promise<number> {
  const cutoff = new Date(now.getTime() - WEBHOOK_RETENTION_DAYS * 24 * 60 * 60 * 1000);
  const result = await db
    .deleteFrom('webhooks')
    .where('status', '!=', 'async_processing')
    .where('updated_at', '<', cutoff)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
