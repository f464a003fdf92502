// A paid call whose process dies mid-call, retried after a restart (docs/decisions.md,
// Idempotency-Key): the service runs as a real child process (server/main.ts under tsx); once the
// client's payment of a /relay with an Idempotency-Key has settled and our paid request reaches the
// target's proxy, which holds it (the target is never paid), the process is killed with SIGKILL. Its idempotency record is left running. A service started on the same
// database answers the same request with the same key 409 while the call's lease has not lapsed or
// its money is still open, and, once the jobs have refunded the client, the clear answer of that
// outcome: a 502 naming the refund record, kept and replayed to every later repeat. The call is
// never run again: the target is never paid, one refund, the client's USDC back to the micro-unit.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { loadConfig } from '../../payments/basics/config';
import type { PaymentRequirements } from '../../payments/x402/types';
import { startService, type Service } from '../../server/service';
import { killChild, startChildService, targetHoldingPaidRequests, waitFor } from '../support/child-service';
import { contractClient, type ContractResponse } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv, pollWebhook } from '../support/proxy';
import { relayLegBalances } from '../support/relay';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 20_000n;
const TOTAL = 20_600n;
const LEASE_MS = 1_500;
/** The relay's watch job (enqueued when the payment is admitted) takes over this long after. */
const ABANDONED_AFTER_MS = 3_000;
const KEY = 'dead-process-retry-1';

let peers: Peers;
let database: TestDatabase;
let directory: string;
let child: ChildProcess | undefined;
let restarted: Service | undefined;
let hold: Awaited<ReturnType<typeof targetHoldingPaidRequests>>;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE }, v2Targets: false });
  database = await createTestDatabase();
  directory = mkdtempSync(path.join(os.tmpdir(), 'idempotency-dead-'));
  hold = await targetHoldingPaidRequests(peers.targets[NETWORK]!.url);
});

afterAll(async () => {
  if (child) await killChild(child);
  await restarted?.stop();
  await ifStarted(hold)?.close();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
  if (directory) rmSync(directory, { recursive: true, force: true });
});

function serviceEnv(): Record<string, string> {
  return {
    ...peersEnv(peers, [new URL(hold.proxy.url).host]),
    DATABASE_URL: database.url,
    // Our authorization to the target, which never arrives there, expires soon.
    RELAY_PAYMENT_WINDOW_SECONDS: '10',
    HOST: '127.0.0.1',
    PORT: '0',
    RELAY_ABANDONED_AFTER_MS: String(ABANDONED_AFTER_MS),
    IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
  };
}

describe('a keyed /relay whose process is killed after the client paid', () => {
  it('a retry after the restart gets 409 while the money is open, then the refund as a kept 502; nothing runs twice', async () => {
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const before = await relayLegBalances(peers, NETWORK, payTo);
    const running = await startChildService(serviceEnv());
    child = running.process;
    const first = contractClient(running.url);
    const body = { api_url: `${hold.proxy.url}/paid`, method: 'GET' };

    const quoted = await first.post('/relay', body);
    expect(quoted.status).toBe(402);
    const offer = (quoted.body.accepts as PaymentRequirements[]).find((entry) => entry.network === NETWORK)!;
    const { header } = await peers.signEvmPayment(offer);
    const headers = { 'X-PAYMENT': header, 'Idempotency-Key': KEY };
    const paying = first.post('/relay', body, { headers }).then(
      (response) => ({ status: response.status }),
      (error: unknown) => ({ error }),
    );
    await hold.paidArrived;
    expect(await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address)).toBe(before.client - TOTAL);

    expect(await killChild(child)).toBe('SIGKILL');
    child = undefined;
    expect(await paying).toMatchObject({ error: expect.anything() });
    const { db } = database.handle;
    const left = await db.selectFrom('idempotency_records').selectAll().executeTakeFirstOrThrow();
    expect(left).toMatchObject({ key: KEY, state: 'running' });
    const relayRow = await db.selectFrom('relay_transactions').selectAll().executeTakeFirstOrThrow();
    const relayTxId = relayRow.id;
    expect(relayRow).toMatchObject({ state: 'settled', idempotency_claim: left.claim });

    restarted = await startService(loadConfig({ ...serviceEnv(), LOG_LEVEL: 'silent' }), {
      logger: pino({ level: 'silent' }),
    });
    const retry = () => contractClient(restarted!.url).post('/relay', body, { headers });
    const early = await retry();
    expect(early.status).toBe(409);
    expect(early.body.code).toBe('idempotency_in_progress');
    expect(early.headers.get('retry-after')).toBe('2');

    const startedAt = Date.now();
    const statuses: number[] = [];
    const answered: ContractResponse = await waitFor(
      'an answer other than 409',
      async () => {
        const response = await retry();
        statuses.push(response.status);
        return response.status === 409 ? undefined : response;
      },
      40_000,
    );
    console.log(
      `retries after the restart: ${statuses.length} (${statuses.filter((status) => status === 409).length} of them 409), the outcome ${Date.now() - startedAt} ms after the first retry`,
    );
    expect(answered.status).toBe(502);
    expect(answered.body).toMatchObject({ code: 'upstream_error', error: 'Bad Gateway' });
    expect(answered.body.message).toContain('your payment was refunded');
    const webhookId = answered.body.webhook_id as string;
    expect(webhookId).toMatch(/^[0-9a-f-]{36}$/);
    expect(answered.headers.get('x-refund-webhook-id')).toBe(webhookId);
    expect(answered.headers.get('x-service-webhook')).toBe(webhookId);
    expect(answered.headers.get('x-client-payment')).toBe(relayRow.client_tx_hash);

    // Kept: every later repeat gets those bytes, and the record says how the refund ended.
    const again = await retry();
    expect(again.status).toBe(502);
    expect(again.text).toBe(answered.text);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const record = await pollWebhook({ client: contractClient(restarted.url) } as never, webhookId, 20_000);
    expect(record.status).toBe(200);
    expect(record.body).toMatchObject({ status: 'refund_confirmed', relayTxId: Number(relayTxId) });
    const kept = await db.selectFrom('idempotency_records').selectAll().executeTakeFirstOrThrow();
    expect(kept).toMatchObject({ state: 'finished', status: 502, claim: left.claim });

    // Never run twice: one relay transaction, refunded once, the target never paid, every leg exact.
    const rows = await db.selectFrom('relay_transactions').selectAll().execute();
    expect(rows.map((row) => [row.id, row.state])).toEqual([[relayTxId, 'refunded']]);
    const refunds = await db.selectFrom('refunds').selectAll().execute();
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ status: 'confirmed', amount_micro: TOTAL });
    expect(target.requests.filter((request) => request.route === 'paid' && request.payment !== null)).toEqual([]);
    expect(await relayLegBalances(peers, NETWORK, payTo)).toEqual(before);
  }, 120_000);
});
