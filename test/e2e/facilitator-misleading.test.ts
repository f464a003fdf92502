// A facilitator that settles and then answers as if it had not. FACILITATOR_URL names a small
// server here that forwards GET /supported and POST /settle to the local x402 facilitator of
// version 1 or 2 (devnet/facilitator), so the payment really moves on the local chain, and then
// replaces its answer: HTTP 402, 400 or 500, `success: false` without or with the transaction, no
// answer at all, or a body that is not a settle response. On every path that settles through a
// facilitator (/relay on EVM and on Solana, the paid chat, /v1/credits/purchase), with the
// unmodified x402-fetch (version 1 facilitator) and @x402/fetch (version 2 facilitator) paying, the
// client never gets a 402 after its money moved, and the money ends delivered or refunded: every
// leg (client, our wallet, the target) is read from the chain. An honest refusal (nothing settled)
// ends with nothing taken, closed by the job once the payment can no longer land; a facilitator
// that answers 402 first and settles a moment later leaves a record the job refunds (or credits).
// Upto payments are settled by our own wallet (we are their facilitator), never through
// FACILITATOR_URL, so they are not in the table.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { x402Client } from '@x402/core/client';
import { wrapFetchWithPayment as wrapFetchV2 } from '@x402/fetch';
import { ExactSvmScheme } from '@x402/svm/exact/client';
import { wrapFetchWithPayment as wrapFetchV1 } from 'x402-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { startLocalLlm, type LocalLlm } from '../../devnet/llm';
import { x402ClientV2 } from '../../devnet/peers/v2-client';
import { createTestAccount } from '../support/accounts';
import { llmEnv, pollWebhook, startProxyService } from '../support/proxy';
import { contractFetch } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const EVM = 'base-sepolia' as const;
const SOLANA = 'solana-devnet' as const;
type Network = typeof EVM | typeof SOLANA;

const TARGET_PRICE = 10_000n;
/** ceil(10,000 x 1.03): the relay's price for the target's 10,000. */
const RELAY_PRICE = 10_300n;
/** LLM_PRICE_USDC 0.01. */
const CHAT_PRICE = 10_000n;
const PURCHASED_CREDITS = 10;
/** 1 credit = 1,000 micro-USDC. */
const PURCHASE_PRICE = 10_000n;
/** How long our service waits for /settle here, so that the no-answer row does not take the default 30 s. */
const FACILITATOR_TIMEOUT_MS = 4_000;
/** Bound for a record to reach its end (a refund sent and confirmed, a payment window closed, the chat follow-up's minute). */
const SETTLE_BOUND_MS = 180_000;
const TEST_TIMEOUT_MS = 2 * SETTLE_BOUND_MS;

const ANSWERS = [
  'HTTP 402',
  'HTTP 400',
  'HTTP 500',
  'success: false, no transaction',
  'success: false, with the transaction',
  'no answer (timeout)',
  'not a settle response',
] as const;
type Answer = (typeof ANSWERS)[number];

const PATHS = ['/relay EVM', '/relay Solana', '/llm/chat', '/v1/credits/purchase'] as const;
type PathName = (typeof PATHS)[number];
type Version = 1 | 2;

/** What POST /settle does: forward to the real facilitator before answering, after, or never; and what it answers. */
interface SettleMode {
  answer: Answer | 'HTTP 402 (honest)';
  settle: 'before' | 'after' | 'never';
}

interface Misleading {
  url: string;
  mode: SettleMode;
  /** The real facilitator's answers to the /settle calls forwarded to it. */
  settled: Array<{ success: boolean; transaction: string }>;
  close(): Promise<void>;
}

/** The lying answer to give for `answer`, once the real facilitator said `real` (undefined when it was not asked). */
function lie(answer: SettleMode['answer'], real: { transaction: string; network?: string } | undefined) {
  const network = real?.network ?? '';
  switch (answer) {
    case 'HTTP 402':
    case 'HTTP 402 (honest)':
      return { status: 402, body: { success: false, errorReason: 'insufficient_funds', transaction: '', network } };
    case 'HTTP 400':
      return { status: 400, body: { error: 'invalid_payload', details: 'the payment could not be read' } };
    case 'HTTP 500':
      return { status: 500, body: { error: 'internal error' } };
    case 'success: false, no transaction':
      return {
        status: 200,
        body: { success: false, errorReason: 'unexpected_settle_error', transaction: '', network },
      };
    case 'success: false, with the transaction':
      return {
        status: 200,
        body: { success: false, errorReason: 'unexpected_settle_error', transaction: real?.transaction ?? '', network },
      };
    case 'not a settle response':
      return { status: 200, body: { status: 'ok', received: true } };
    case 'no answer (timeout)':
      return undefined;
  }
}

async function startMisleading(upstream: string): Promise<Misleading> {
  const held = new Set<ServerResponse>();
  const forward = async (body: string) => {
    const answer = await fetch(`${upstream}/settle`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    const settled = (await answer.json()) as { success: boolean; transaction: string; network?: string };
    misleading.settled.push(settled);
    return settled;
  };
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      void (async () => {
        if (request.method === 'GET' && request.url === '/supported') {
          const text = await (await fetch(`${upstream}/supported`)).text();
          response.writeHead(200, { 'content-type': 'application/json' }).end(text);
          return;
        }
        const { answer, settle } = misleading.mode;
        const real = settle === 'before' ? await forward(body) : undefined;
        if (settle === 'after') setTimeout(() => void forward(body).catch(() => {}), 1_500);
        const lying = lie(answer, real);
        if (lying === undefined) {
          held.add(response);
          return;
        }
        response.writeHead(lying.status, { 'content-type': 'application/json' }).end(JSON.stringify(lying.body));
      })().catch(() => response.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const misleading: Misleading = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    mode: { answer: 'HTTP 402', settle: 'before' },
    settled: [],
    async close() {
      for (const response of held) response.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
  return misleading;
}

let peers: Peers;
let llm: LocalLlm;
const services: Partial<Record<Version, { t: TestService; facilitator: Misleading }>> = {};

beforeAll(async () => {
  [peers, llm] = await Promise.all([startPeers({ networks: [EVM, SOLANA], v2Targets: false }), startLocalLlm()]);
  await Promise.all(
    ([1, 2] as const).map(async (version) => {
      const facilitator = await startMisleading(version === 1 ? peers.facilitator.url : peers.facilitatorV2.url);
      const t = await startProxyService(peers, { ...llmEnv(llm), FACILITATOR_URL: facilitator.url });
      t.service.deps.paymentBounds.facilitatorTimeoutMs = FACILITATOR_TIMEOUT_MS;
      services[version] = { t, facilitator };
    }),
  );
});

afterAll(async () => {
  for (const entry of Object.values(services)) {
    await ifStarted(entry.t)?.stop();
    await entry.facilitator.close();
  }
  await ifStarted(llm)?.close();
  await ifStarted(peers)?.stop();
});

function serviceOf(version: Version) {
  const entry = services[version]!;
  return { ...entry, db: entry.t.database.handle.db };
}

/** The client's fetch: x402-fetch 1.2 against the version 1 facilitator's service, @x402/fetch 2.27 against the version 2 one. */
function payingFetch(version: Version, network: Network, inner: typeof fetch = contractFetch()): typeof fetch {
  if (version === 1) {
    const wallet =
      network === SOLANA ? peers.wallets.client.solana.signer : (peers.evmWalletClient(EVM) as unknown as never);
    return wrapFetchV1(inner, wallet, 1_000_000n, undefined, {
      svmConfig: { rpcUrl: peers.rpcUrls[SOLANA]! },
    }) as typeof fetch;
  }
  const client =
    network === SOLANA
      ? new x402Client().register(
          'solana:*',
          new ExactSvmScheme(peers.wallets.client.solana.signer, { rpcUrl: peers.rpcUrls[SOLANA]! }),
        )
      : x402ClientV2(peers.wallets.client.evm.account);
  return wrapFetchV2(inner, client);
}

const networkOf = (path: PathName): Network => (path === '/relay Solana' ? SOLANA : EVM);

async function legs(network: Network) {
  const wallets = peers.wallets;
  const side = network === SOLANA ? 'solana' : 'evm';
  return {
    client: await peers.usdcBalance(network, wallets.client[side].address),
    us: await peers.usdcBalance(network, wallets.service[side].address),
    target: await peers.usdcBalance(network, peers.targets[network]!.payTo),
  };
}

type Legs = Awaited<ReturnType<typeof legs>>;
const moved = (before: Legs, after: Legs): Legs => ({
  client: after.client - before.client,
  us: after.us - before.us,
  target: after.target - before.target,
});

/** One paid call on `path`: the response and, for a purchase, the organisation that bought. */
/** The slot when the last Solana payment was answered (its blockhash no newer): the next one waits for a newer slot. */
let lastSolanaSlot = -1n;

/**
 * x402-fetch's Solana payment of the same amount with the same blockhash is the same transaction,
 * which the service takes for a repeat of the first: each payment waits for a slot of its own.
 */
async function freshSolanaSlot(): Promise<void> {
  const ledger = peers.solanaLedgers[SOLANA]!;
  const deadline = Date.now() + 30_000;
  while (ledger.slot <= lastSolanaSlot && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 50));
}

async function pay(version: Version, path: PathName, inner?: typeof fetch) {
  const { t, db } = serviceOf(version);
  if (networkOf(path) === SOLANA) await freshSolanaSlot();
  const fetchPaying = payingFetch(version, networkOf(path), inner);
  const post = (route: string, body: unknown, headers: Record<string, string> = {}) =>
    fetchPaying(`${t.service.url}${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  switch (path) {
    case '/relay EVM':
    case '/relay Solana': {
      const network = networkOf(path);
      const response = await post('/relay', { api_url: peers.targets[network]!.routes.paid.url, method: 'GET' });
      if (network === SOLANA) lastSolanaSlot = peers.solanaLedgers[SOLANA]!.slot;
      return { response };
    }
    case '/llm/chat':
      return { response: await post('/llm/chat', { messages: [{ role: 'user', content: 'hello' }] }) };
    case '/v1/credits/purchase': {
      const account = await createTestAccount(db);
      const response = await post('/v1/credits/purchase', { credits: PURCHASED_CREDITS }, { 'x-api-key': account.key });
      return { response, organisationId: account.organisationId };
    }
  }
}

/** The states a payment's record ends in (a chat or purchase as well as a relay). */
const FINISHED = ['delivered', 'refunded', 'refund_failed', 'settle_failed'];

/** Waits until the newest payment record of the service has ended, and says how (a purchase: its credits too). */
async function finished(version: Version, path: PathName, organisationId?: bigint): Promise<string> {
  const { db } = serviceOf(version);
  const deadline = Date.now() + SETTLE_BOUND_MS;
  for (;;) {
    const row = await db.selectFrom('relay_transactions').selectAll().orderBy('id', 'desc').executeTakeFirstOrThrow();
    if (path !== '/v1/credits/purchase') {
      if (FINISHED.includes(row.state) || Date.now() > deadline) return row.state;
    } else {
      const purchase = await db
        .selectFrom('credit_purchases')
        .innerJoin('organisations', 'organisations.id', 'credit_purchases.organisation_id')
        .select(['credit_purchases.state', 'organisations.credit_balance'])
        .where('organisation_id', '=', organisationId!)
        .executeTakeFirstOrThrow();
      if (purchase.state !== 'settling' || Date.now() > deadline)
        return `${purchase.state}, record ${row.state}, balance ${purchase.credit_balance}`;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** What the path's price moves when it is delivered: the client pays, we keep the fee, the target is paid. */
function delivered(path: PathName): Legs {
  if (path === '/llm/chat') return { client: -CHAT_PRICE, us: CHAT_PRICE, target: 0n };
  if (path === '/v1/credits/purchase') return { client: -PURCHASE_PRICE, us: PURCHASE_PRICE, target: 0n };
  return { client: -RELAY_PRICE, us: RELAY_PRICE - TARGET_PRICE, target: TARGET_PRICE };
}

interface Cell {
  status: number;
  ended: string;
  moved: Legs;
}
const table = new Map<string, Cell>();

function cellText(cell: Cell): string {
  const legs = `client ${cell.moved.client}, us ${cell.moved.us > 0n ? '+' : ''}${cell.moved.us}, target ${cell.moved.target > 0n ? '+' : ''}${cell.moved.target}`;
  return `${cell.status}; ${cell.ended}; ${legs}`;
}

describe.each([1, 2] as const)('a version %i facilitator that settles and then answers as if it had not', (version) => {
  for (const path of PATHS) {
    it.each(ANSWERS)(
      `${path}, answered %s: never a 402, and the payment is delivered`,
      async (answer) => {
        const { facilitator } = serviceOf(version);
        facilitator.mode = { answer, settle: 'before' };
        const settledBefore = facilitator.settled.length;
        const network = networkOf(path);
        const before = await legs(network);
        const { response, organisationId } = await pay(version, path);
        await response.text();
        // The real facilitator settled it: the money left the client before the misleading answer.
        expect(facilitator.settled.slice(settledBefore)).toEqual([expect.objectContaining({ success: true })]);
        expect(response.status).not.toBe(402);
        // The chain shows the payment at once: the call is delivered as for an honest facilitator.
        expect(response.status).toBe(200);
        const ended = await finished(version, path, organisationId);
        const cell = { status: response.status, ended, moved: moved(before, await legs(network)) };
        table.set(`${version}|${path}|${answer}`, cell);
        expect(cell.moved).toEqual(delivered(path));
        if (path === '/v1/credits/purchase')
          expect(ended).toBe(`credited, record delivered, balance ${PURCHASED_CREDITS}`);
        else expect(ended).toBe('delivered');
      },
      TEST_TIMEOUT_MS,
    );
  }
});

/** The status a path answers while the payment is not confirmed: /relay 502, the chat its answer, a purchase 202. */
const UNCONFIRMED_STATUS: Record<PathName, number> = {
  '/relay EVM': 502,
  '/relay Solana': 502,
  '/llm/chat': 200,
  '/v1/credits/purchase': 202,
};

/** x402-fetch 1.2 signs an authorization valid for the offer's maxTimeoutSeconds: shortened here, so that it expires within the test. */
function shortWindow(seconds: number): typeof fetch {
  const checked = contractFetch();
  return async (input, init) => {
    const response = await checked(input, init);
    if (response.status !== 402) return response;
    const body = (await response.json()) as { accepts: Array<{ maxTimeoutSeconds: number }> };
    for (const accept of body.accepts) accept.maxTimeoutSeconds = seconds;
    return new Response(JSON.stringify(body), { status: 402, headers: response.headers });
  };
}

/**
 * Pays `path` once against the version 1 service as the facilitator's mode says and checks the
 * first answer: never a 402, and the record to follow named. Returns what the end is read with.
 */
async function payUnconfirmed(path: PathName, inner?: typeof fetch) {
  const network = networkOf(path);
  const before = await legs(network);
  const { response, organisationId } = await pay(1, path, inner);
  await response.text();
  expect(response.status).toBe(UNCONFIRMED_STATUS[path]);
  const webhookId = response.headers.get('x-service-webhook');
  expect(webhookId).toMatch(/^[0-9a-f-]{36}$/);
  const { db } = serviceOf(1);
  const row = await db.selectFrom('relay_transactions').selectAll().orderBy('id', 'desc').executeTakeFirstOrThrow();
  expect(row.state).toBe('settling');
  return { path, network, before, status: response.status, webhookId: webhookId!, id: row.id, organisationId };
}

/** How the record of a call ended (a purchase: its credits too), read once it has. */
async function endOf(call: Awaited<ReturnType<typeof payUnconfirmed>>) {
  const { t, db } = serviceOf(1);
  const record = await pollWebhook(t, call.webhookId, SETTLE_BOUND_MS);
  const row = await db.selectFrom('relay_transactions').selectAll().where('id', '=', call.id).executeTakeFirstOrThrow();
  let ended = row.state as string;
  if (call.path === '/v1/credits/purchase') {
    const purchase = await db
      .selectFrom('credit_purchases')
      .innerJoin('organisations', 'organisations.id', 'credit_purchases.organisation_id')
      .select(['credit_purchases.state', 'organisations.credit_balance'])
      .where('organisation_id', '=', call.organisationId!)
      .executeTakeFirstOrThrow();
    ended = `${purchase.state}, record ${row.state}, balance ${purchase.credit_balance}`;
  }
  const cell = { status: call.status, ended, moved: moved(call.before, await legs(call.network)) };
  return { record: record.body as { status: string }, row, cell };
}

describe('a facilitator that answers 402 and settles a moment later (version 1)', () => {
  it.each(PATHS)(
    '%s: the record it is answered with ends delivered (chat, credits) or refunded (relay)',
    async (path) => {
      serviceOf(1).facilitator.mode = { answer: 'HTTP 402', settle: 'after' };
      const call = await payUnconfirmed(path);
      const { record, cell } = await endOf(call);
      table.set(`1|${path}|HTTP 402, settled after the answer`, cell);
      if (path === '/v1/credits/purchase' || path === '/llm/chat') {
        expect(record.status).toBe('success');
        expect(cell.ended).toBe(
          path === '/llm/chat' ? 'delivered' : `credited, record delivered, balance ${PURCHASED_CREDITS}`,
        );
        expect(cell.moved).toEqual(delivered(path));
      } else {
        expect(record.status).toBe('refund_confirmed');
        expect(cell.ended).toBe('refunded');
        expect(cell.moved).toEqual({ client: 0n, us: 0n, target: 0n });
      }
    },
    TEST_TIMEOUT_MS,
  );
});

describe('an honest refusal: the facilitator settles nothing and answers 402 (version 1)', () => {
  it(
    'every path: answered with the record, closed by the job once the payment can no longer land, nothing taken',
    async () => {
      const { facilitator } = serviceOf(1);
      facilitator.mode = { answer: 'HTTP 402 (honest)', settle: 'never' };
      const settledBefore = facilitator.settled.length;
      const calls = [];
      // EVM authorizations valid 40 s (Solana's blockhash lives about 60 s here).
      for (const path of PATHS)
        calls.push(await payUnconfirmed(path, path === '/relay Solana' ? undefined : shortWindow(40)));
      const ends = await Promise.all(calls.map(endOf));
      for (const [index, { record, row, cell }] of ends.entries()) {
        const path = calls[index]!.path;
        table.set(`1|${path}|HTTP 402, nothing settled (honest)`, cell);
        expect(record.status).toBe('failed');
        expect(row).toMatchObject({ state: 'settle_failed', failure_reason: 'expired' });
        if (path === '/v1/credits/purchase') expect(cell.ended).toBe('failed, record settle_failed, balance 0');
        expect(cell.moved).toEqual({ client: 0n, us: 0n, target: 0n });
      }
      expect(facilitator.settled.length).toBe(settledBefore);
    },
    TEST_TIMEOUT_MS,
  );
});

afterAll(() => {
  // The misleading-facilitator table, as measured: what the client got; how the record ended; each leg's move.
  const lines = [
    '| facilitator | answer | ' + PATHS.join(' | ') + ' |',
    '|---|---|' + PATHS.map(() => '---|').join(''),
  ];
  const answers = [...ANSWERS, 'HTTP 402, settled after the answer', 'HTTP 402, nothing settled (honest)'] as const;
  for (const version of [1, 2] as const)
    for (const answer of answers) {
      const cells = PATHS.map((path) => table.get(`${version}|${path}|${answer}`));
      if (cells.every((cell) => cell === undefined)) continue;
      lines.push(`| v${version} | ${answer} | ${cells.map((cell) => (cell ? cellText(cell) : '')).join(' | ')} |`);
    }
  console.log(lines.join('\n'));
});
