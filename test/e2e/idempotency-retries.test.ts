// Retries after a lost answer, many at once (issue 13, point 4): CALLS paid calls over /proxy and
// /relay whose client connection is cut at a random moment after the request is sent, each then
// retried with the same Idempotency-Key or the same payment until it gets a final answer. No call
// is paid or charged twice (credits ledger and on-chain balances exact), and every retry gets the
// first call's answer (the one kept in the database, byte for byte) or a 409 while it runs.
// Every response is checked against the document.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type { PaymentRequirements as PeerRequirements, Peers } from '../../devnet/index';
import { createTestAccount } from '../support/accounts';
import type { ContractResponse } from '../support/contract';
import { ledgerSums, startPeersAndProxyService } from '../support/proxy';
import { relayRows } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

/** Paid calls through /proxy (each with its own Idempotency-Key). */
const PROXY_CALLS = 500;
/** Paid calls through /relay: half retried with an Idempotency-Key, half with the payment alone. */
const RELAY_CALLS = 500;
export const CALLS = PROXY_CALLS + RELAY_CALLS;
/** Calls in flight at once. */
const CONCURRENCY = 20;
/** The target takes 0 to this long to answer; the first attempt is cut 0 to CUT_MAX_MS after it is sent. */
const TARGET_DELAY_MAX_MS = 400;
const CUT_MAX_MS = 2_500;
/** A call still without a final answer after this long fails the test (generous: a loaded machine is slow, not wrong). */
const RETRY_DEADLINE_MS = 180_000;

const NETWORK = 'base-sepolia';
const PRICE = 12_345n;
const CREDITS = 13n;
const TOTAL = 12_716n;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  ({ peers, t, db } = await startPeersAndProxyService({ networks: [NETWORK], pricesMicroUsdc: { slow: PRICE } }));
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const target = () => peers.targets[NETWORK]!;
const usdc = (address: string) => peers.usdcBalance(NETWORK, address);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Call {
  path: '/proxy' | '/relay';
  body: { api_url: string; method: 'GET' };
  /** Built again for each attempt: the same key, the same payment. */
  headers: Record<string, string>;
  /** The record it runs under, to read the kept answer. */
  scope: 'proxy' | 'relay-key' | 'relay-payment';
}

interface Figures {
  cut: number;
  answeredBeforeCut: number;
  retries: number;
  inProgress: number;
  replayed: number;
  /** Retries that ran the call: the cut came before the service took the request. */
  ranOnRetry: number;
}

const figures: Figures = { cut: 0, answeredBeforeCut: 0, retries: 0, inProgress: 0, replayed: 0, ranOnRetry: 0 };

function finalAnswer(res: ContractResponse) {
  return { status: res.status, contentType: res.headers.get('content-type'), text: res.text };
}

/** One call: the first attempt cut at a random moment, then retried until a final answer; every answer is returned. */
async function run(call: Call): Promise<ContractResponse[]> {
  const answers: ContractResponse[] = [];
  const controller = new AbortController();
  const cut = setTimeout(() => controller.abort(), Math.random() * CUT_MAX_MS);
  try {
    answers.push(await t.client.post(call.path, call.body, { headers: call.headers, signal: controller.signal }));
    figures.answeredBeforeCut += 1;
  } catch (error) {
    if (!(error instanceof Error) || error.name !== 'AbortError') throw error;
    figures.cut += 1;
  } finally {
    clearTimeout(cut);
  }
  const deadline = Date.now() + RETRY_DEADLINE_MS;
  // A call answered before its cut is retried once as well: the repeat must be its replay.
  for (let final = answers.length > 0 && answers[0]!.status !== 409; ;) {
    figures.retries += 1;
    const res = await t.client.post(call.path, call.body, { headers: call.headers });
    answers.push(res);
    if (res.status === 409) {
      figures.inProgress += 1;
      expect(res.body.code).toBe('idempotency_in_progress');
      expect(res.headers.get('retry-after')).toBe('2');
      expect(Date.now()).toBeLessThan(deadline);
      // Sooner than Retry-After, to keep the test short; the answer is the same.
      await sleep(100 + Math.random() * 150);
      continue;
    }
    if (res.headers.get('idempotent-replayed') === 'true') figures.replayed += 1;
    else figures.ranOnRetry += 1;
    if (final) break;
    final = true;
    if (res.headers.get('idempotent-replayed') === 'true') break;
  }
  return answers;
}

async function pool<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index]!);
      }
    }),
  );
  return results;
}

const slowBody = () => ({
  api_url: `${target().routes.slow.url}?delayMs=${Math.floor(Math.random() * TARGET_DELAY_MAX_MS)}`,
  method: 'GET' as const,
});

it(`${CALLS} paid calls cut at a random moment and retried: each paid and charged once, every retry the first answer or 409`, async () => {
  const account = await createTestAccount(db, { credits: 10_000n });
  const serviceAddress = peers.wallets.service.evm.address;
  const clientAddress = peers.wallets.client.evm.address;
  const payTo = target().routes.slow.payTo;
  const before = {
    service: await usdc(serviceAddress),
    client: await usdc(clientAddress),
    target: await usdc(payTo),
    paid: target().requests.filter((request) => request.payment !== null).length,
  };

  const calls: Call[] = [];
  for (let index = 0; index < PROXY_CALLS; index += 1) {
    calls.push({
      path: '/proxy',
      body: slowBody(),
      headers: { 'x-api-key': account.key, 'Idempotency-Key': randomUUID() },
      scope: 'proxy',
    });
  }
  for (let index = 0; index < RELAY_CALLS; index += 1) {
    const body = slowBody();
    const offer = await t.client.post('/relay', body);
    expect(offer.status).toBe(402);
    const { header } = await peers.signEvmPayment(offer.body.accepts[0] as PeerRequirements);
    const withKey = index % 2 === 0;
    calls.push({
      path: '/relay',
      body,
      headers: { 'X-PAYMENT': header, ...(withKey ? { 'Idempotency-Key': randomUUID() } : {}) },
      scope: withKey ? 'relay-key' : 'relay-payment',
    });
  }
  // Interleave /proxy and /relay.
  calls.sort(() => Math.random() - 0.5);

  const started = Date.now();
  const answered = await pool(calls, CONCURRENCY, run);
  const elapsedMs = Date.now() - started;

  // Every call ends with the target's 200, and every answer it got but a 409 is that same answer,
  // byte for byte: the one the database kept from its first run.
  for (const [index, answers] of answered.entries()) {
    const finals = answers.filter((res) => res.status !== 409);
    expect(finals.length).toBeGreaterThan(0);
    expect(finals[0]!.status).toBe(200);
    for (const res of finals) expect(finalAnswer(res)).toEqual(finalAnswer(finals[0]!));
    const call = calls[index]!;
    const key = call.headers['Idempotency-Key'];
    if (key !== undefined) {
      const kept = await db
        .selectFrom('idempotency_records')
        .select(['state', 'status', 'body'])
        .where('key', '=', key)
        .executeTakeFirstOrThrow();
      expect(kept.state).toBe('finished');
      expect(kept.status).toBe(finals[0]!.status);
      expect(kept.body!.toString('utf8')).toBe(finals[0]!.text);
    }
  }
  const kept = await db
    .selectFrom('idempotency_records')
    .select(({ fn }) => fn.countAll<string>().as('n'))
    .where('state', '=', 'finished')
    .executeTakeFirstOrThrow();
  expect(Number(kept.n)).toBeGreaterThanOrEqual(CALLS);

  // Proxy: every payment charged once, never released; one paid request per call reached the target.
  for (let waited = 0; waited < 20; waited += 1) {
    const open = await db
      .selectFrom('proxy_payments')
      .select('id')
      .where('organisation_id', '=', account.organisationId)
      .where('state', '!=', 'charged')
      .execute();
    if (open.length === 0) break;
    await sleep(500);
  }
  const payments = await db
    .selectFrom('proxy_payments')
    .select('state')
    .where('organisation_id', '=', account.organisationId)
    .execute();
  expect(payments.map((row) => row.state)).toEqual(Array(PROXY_CALLS).fill('charged'));
  expect(await ledgerSums(db, account.organisationId)).toEqual({
    grant: 10_000n,
    reserve: BigInt(PROXY_CALLS) * CREDITS,
    charge: BigInt(PROXY_CALLS) * CREDITS,
    release: 0n,
    refund: 0n,
  });
  // Relay: one delivered transaction per call.
  const relays = (await relayRows(db)).filter((row) => row.mode === 'relay');
  expect(relays.map((row) => row.state)).toEqual(Array(RELAY_CALLS).fill('delivered'));
  // On chain: the target paid once per call, the client once per relay.
  expect(target().requests.filter((request) => request.payment !== null).length - before.paid).toBe(CALLS);
  expect(await usdc(payTo)).toBe(before.target + BigInt(CALLS) * PRICE);
  expect(await usdc(clientAddress)).toBe(before.client - BigInt(RELAY_CALLS) * TOTAL);
  expect(await usdc(serviceAddress)).toBe(before.service - BigInt(CALLS) * PRICE + BigInt(RELAY_CALLS) * TOTAL);

  // The figures for the closing note.
  console.info(
    `idempotency retries: ${CALLS} calls (${PROXY_CALLS} proxy, ${RELAY_CALLS} relay) in ${elapsedMs} ms; ` +
      `first attempt cut ${figures.cut}, answered before the cut ${figures.answeredBeforeCut}; ` +
      `${figures.retries} retries: ${figures.inProgress} x 409, ${figures.replayed} replays, ` +
      `${figures.ranOnRetry} ran the call (cut before the service took it); double charges 0`,
  );
  expect(figures.cut).toBeGreaterThan(0);
  expect(figures.replayed).toBeGreaterThan(0);
  // A bound on the whole run, not a speed goal: on a loaded CI machine the calls take several times longer.
}, 900_000);
