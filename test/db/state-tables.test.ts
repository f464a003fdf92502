// The tables of allowed moves are the rules: the diagram in each table's header and in
// docs/architecture.md section 3 draws exactly the table, each write function (and each database
// function that makes a move) moves a row from exactly the states the table allows, from every
// state, against Postgres, and a move the table does not hold is refused.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import type {
  ProxyPaymentState,
  RefundStatus,
  RelayTransactionState,
  StoredWebhookStatus,
  Finality,
} from '../../db/schema';
import { holdProxyPayment } from '../../payments/operations/proxy/records';
import { moveProxyPayment, PROXY_MOVES, type ProxyMove } from '../../payments/operations/proxy/states';
import { scheduleRefund } from '../../payments/operations/relay/outcome';
import { moveRefund, REFUND_MOVES } from '../../payments/incoming/refundStates';
import { moveRelayTransaction, RELAY_MOVES } from '../../payments/incoming/states';
import { recordClientPayment, recordTargetPayment } from '../../payments/incoming/store';
import type { MoveTable } from '../../payments/basics/states';
import { completeWebhook, openWebhook, type WebhookOutcome } from '../../payments/tracking/webhooks';
import { WEBHOOK_MOVES } from '../../payments/tracking/webhookStates';
import { FINALITY_MOVES, moveFinalityWatch } from '../../payments/tracking/finalityStates';
import type { PaymentChoice } from '../../payments/x402/choose';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { FIXTURE_PAYER, FIXTURE_USDC, verifiedPayment } from '../support/verified-payment';
import { NO_POLICY } from '../../payments/accounts/policy';

const TABLES: { name: string; file: string; moves: MoveTable<string> }[] = [
  { name: 'RELAY_MOVES', file: 'payments/incoming/states.ts', moves: RELAY_MOVES },
  { name: 'REFUND_MOVES', file: 'payments/incoming/refundStates.ts', moves: REFUND_MOVES },
  { name: 'PROXY_MOVES', file: 'payments/operations/proxy/states.ts', moves: PROXY_MOVES },
  { name: 'WEBHOOK_MOVES', file: 'payments/tracking/webhookStates.ts', moves: WEBHOOK_MOVES },
  { name: 'FINALITY_MOVES', file: 'payments/tracking/finalityStates.ts', moves: FINALITY_MOVES },
];

const STATE = /^[a-z_]+$/;

/**
 * The moves a diagram draws. Each line is a chain of groups joined by arrows; a group is states
 * joined by bars, and every state of a group moves to every state of the next. A line with an
 * arrow that is not such a chain fails the test rather than being skipped.
 */
function movesOf(lines: string[]): string[] {
  const moves: string[] = [];
  for (const line of lines) {
    const groups = line.split('->').map((group) => group.split('|').map((state) => state.trim()));
    for (const state of groups.flat()) {
      if (!STATE.test(state)) throw new Error(`not a diagram line: ${line}`);
    }
    for (let i = 0; i + 1 < groups.length; i += 1) {
      for (const from of groups[i]!) for (const to of groups[i + 1]!) moves.push(`${from} -> ${to}`);
    }
  }
  return [...new Set(moves)].sort();
}

function tableMoves(moves: MoveTable<string>): string[] {
  return Object.entries(moves)
    .flatMap(([from, tos]) => tos.map((to) => `${from} -> ${to}`))
    .sort();
}

/** The lines of the file's header comment that hold an arrow. */
function headerDiagram(file: string): string[] {
  const source = readFileSync(file, 'utf8');
  const header = source.slice(source.indexOf('/**'), source.indexOf('*/'));
  return header
    .split('\n')
    .map((line) => line.replace(/^\s*\*\s?/, ''))
    .filter((line) => line.includes('->'));
}

/** The code blocks of docs/architecture.md section 3, each by the *_MOVES table its paragraph names. */
function documentedDiagrams(): Map<string, string[]> {
  const doc = readFileSync('docs/architecture.md', 'utf8');
  const section = doc.slice(doc.indexOf('## 3.'), doc.indexOf('## 4.'));
  const diagrams = new Map<string, string[]>();
  const block = /([\s\S]*?)```\n([\s\S]*?)```/g;
  let match: RegExpExecArray | null;
  while ((match = block.exec(section)) !== null) {
    const names = [...match[1]!.matchAll(/`([A-Z_]+_MOVES)`/g)].map((name) => name[1]!);
    const name = names.at(-1);
    if (name === undefined) throw new Error(`a diagram of section 3 names no table: ${match[2]}`);
    diagrams.set(
      name,
      match[2]!.split('\n').filter((line) => line.includes('->')),
    );
  }
  return diagrams;
}

describe('each table and its diagrams', () => {
  for (const table of TABLES) {
    it(`${table.name}: the header of ${table.file} draws exactly the table`, () => {
      const lines = headerDiagram(table.file);
      expect(lines.length).toBeGreaterThan(0);
      expect(movesOf(lines)).toEqual(tableMoves(table.moves));
    });
    it(`${table.name}: docs/architecture.md draws exactly the table`, () => {
      const lines = documentedDiagrams().get(table.name);
      expect(lines, `section 3 has no diagram for ${table.name}`).toBeDefined();
      expect(movesOf(lines!)).toEqual(tableMoves(table.moves));
    });
  }

  it('the parser reads bars and chains, and refuses a line it cannot read', () => {
    expect(movesOf(['a | b -> c -> d'])).toEqual(['a -> c', 'b -> c', 'c -> d']);
    expect(() => movesOf(['a -> b (when paid)'])).toThrow(/not a diagram line/);
  });
});

let database: TestDatabase;
let db: Db;
beforeAll(async () => {
  database = await createTestDatabase();
  db = database.handle.db;
});
afterAll(async () => {
  await database.drop();
});

function hex32(): string {
  return `0x${randomBytes(32).toString('hex')}`;
}

const USDC = FIXTURE_USDC;
const PAYER = FIXTURE_PAYER;

/** A refund of 10,300 micro-USDC to PAYER on base-sepolia for relay transaction `relayId`, pending unless `state` says otherwise. */
async function newRefund(relayId: bigint, state: { status?: RefundStatus; tx_hash?: string } = {}) {
  return db
    .insertInto('refunds')
    .values({
      relay_transaction_id: relayId,
      network: 'base-sepolia',
      asset: USDC,
      recipient: PAYER,
      amount_micro: 10_300n,
      method: 'direct',
      ...state,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
}

async function newRelayTransaction(): Promise<bigint> {
  const recorded = await recordClientPayment(db, verifiedPayment(), { mode: 'relay' });
  if (!recorded.ok) throw new Error(recorded.details);
  return recorded.value.id;
}

/** Every (from, to) pair of a table's states, the allowed ones and the others. */
function everyPair<S extends string>(moves: MoveTable<S>): { from: S; to: S; allowed: boolean }[] {
  const states = Object.keys(moves) as S[];
  return states.flatMap((from) => states.map((to) => ({ from, to, allowed: moves[from].includes(to) })));
}

/** States something may move to; a write to any other state is refused before it reaches the database. */
function reachable<S extends string>(moves: MoveTable<S>): Set<S> {
  return new Set((Object.values(moves) as S[][]).flat());
}

describe('relay transactions: moveRelayTransaction', () => {
  it('moves a row from exactly the states RELAY_MOVES allows, from every state', async () => {
    const id = await newRelayTransaction();
    const targets = reachable<RelayTransactionState>(RELAY_MOVES);
    for (const { from, to, allowed } of everyPair<RelayTransactionState>(RELAY_MOVES)) {
      await db.updateTable('relay_transactions').set({ state: from }).where('id', '=', id).execute();
      if (!targets.has(to)) {
        await expect(moveRelayTransaction(db, id, to), `${from} -> ${to}`).rejects.toThrow(/nothing may move to/);
        continue;
      }
      const moved = await moveRelayTransaction(db, id, to);
      expect(moved !== undefined, `${from} -> ${to}`).toBe(allowed);
      const row = await db
        .selectFrom('relay_transactions')
        .select('state')
        .where('id', '=', id)
        .executeTakeFirstOrThrow();
      expect(row.state, `${from} -> ${to}`).toBe(allowed ? to : from);
    }
  });

  it('refuses a narrowed move the table does not hold, before writing anything', async () => {
    const id = await newRelayTransaction();
    await db.updateTable('relay_transactions').set({ state: 'settle_failed' }).where('id', '=', id).execute();
    await expect(moveRelayTransaction(db, id, 'settled', {}, { from: ['settle_failed' as never] })).rejects.toThrow(
      /settle_failed -> settled is not an allowed move/,
    );
    await expect(moveRelayTransaction(db, id, 'settled', {}, { from: [] })).rejects.toThrow(/not an allowed move/);
    const row = await db
      .selectFrom('relay_transactions')
      .select('state')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(row.state).toBe('settle_failed');
  });

  it('scheduleRefund moves only from settled, and past a recorded target payment only when the chain said it cannot land', async () => {
    const fromDelivered = await newRelayTransaction();
    await db.updateTable('relay_transactions').set({ state: 'delivered' }).where('id', '=', fromDelivered).execute();
    expect(await scheduleRefund(db, fromDelivered, { reason: 'test' })).toBeUndefined();

    const paid = await newRelayTransaction();
    await db.updateTable('relay_transactions').set({ state: 'settled' }).where('id', '=', paid).execute();
    await recordTargetPayment(db, paid, { network: 'base-sepolia', amountMicroUsdc: 10_000n, paymentRef: hex32() });
    expect(await scheduleRefund(db, paid, { reason: 'test' })).toBeUndefined();
    let row = await db
      .selectFrom('relay_transactions')
      .select(['state', 'webhook_id'])
      .where('id', '=', paid)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ state: 'settled', webhook_id: null });

    const scheduled = await scheduleRefund(db, paid, {
      reason: 'the target never charged',
      targetStatus: 402,
      targetNeverCharged: true,
    });
    expect(scheduled?.webhookId).toBeDefined();
    row = await db
      .selectFrom('relay_transactions')
      .select(['state', 'webhook_id'])
      .where('id', '=', paid)
      .executeTakeFirstOrThrow();
    expect(row).toEqual({ state: 'refund_pending', webhook_id: scheduled!.webhookId });
    const full = await db
      .selectFrom('relay_transactions')
      .select(['outcome', 'target_status'])
      .where('id', '=', paid)
      .executeTakeFirstOrThrow();
    expect(full).toEqual({ outcome: 'the target never charged', target_status: 402 });
    // Decided once: a second decision finds the row gone from settled.
    expect(await scheduleRefund(db, paid, { reason: 'again', targetNeverCharged: true })).toBeUndefined();
  });
});

describe('refunds: moveRefund', () => {
  it('moves a refund from exactly the statuses REFUND_MOVES allows, from every status', async () => {
    const relayId = await newRelayTransaction();
    const refund = await newRefund(relayId);
    const targets = reachable<RefundStatus>(REFUND_MOVES);
    for (const { from, to, allowed } of everyPair<RefundStatus>(REFUND_MOVES)) {
      await db.updateTable('refunds').set({ status: from }).where('id', '=', refund.id).execute();
      if (!targets.has(to)) {
        await expect(moveRefund(db, refund.id, to)).rejects.toThrow(/nothing may move to/);
        continue;
      }
      expect((await moveRefund(db, refund.id, to)) !== undefined, `${from} -> ${to}`).toBe(allowed);
      const row = await db.selectFrom('refunds').select('status').where('id', '=', refund.id).executeTakeFirstOrThrow();
      expect(row.status, `${from} -> ${to}`).toBe(allowed ? to : from);
    }
  });
});

describe('finality watches: moveFinalityWatch, and the triggers that open them', () => {
  it("a relay's client settlement is watched once settled, its target payment only once delivered (a reported hash is no proof)", async () => {
    const id = await newRelayTransaction();
    const legs = async () =>
      (await db.selectFrom('finality_watches').select('leg').where('relay_transaction_id', '=', id).execute()).map(
        (watch) => watch.leg,
      );
    await moveRelayTransaction(db, id, 'settling', { client_tx_hash: hex32() });
    expect(await legs()).toEqual([]);
    await moveRelayTransaction(db, id, 'settled', { settled_at: new Date() });
    expect(await legs()).toEqual(['client_settlement']);
    await recordTargetPayment(db, id, { network: 'base-sepolia', amountMicroUsdc: 10_000n, paymentRef: hex32() });
    await db.updateTable('relay_transactions').set({ target_tx_hash: hex32() }).where('id', '=', id).execute();
    expect(await legs()).toEqual(['client_settlement']);
    await moveRelayTransaction(db, id, 'delivered');
    expect(await legs()).toEqual(['client_settlement', 'target_payment']);
  });

  it('a confirmed refund opens one watch with its job; the watch moves from exactly the states FINALITY_MOVES allows', async () => {
    const relayId = await newRelayTransaction();
    const refund = await newRefund(relayId, { status: 'confirmed', tx_hash: hex32() });
    // Written again: still one watch.
    await db.updateTable('refunds').set({ status: 'confirmed' }).where('id', '=', refund.id).execute();
    const watches = await db.selectFrom('finality_watches').selectAll().where('refund_id', '=', refund.id).execute();
    expect(watches.map((watch) => [watch.leg, watch.finality, watch.amount_micro_usdc])).toEqual([
      ['refund', 'pending', 10_300n],
    ]);
    const watch = watches[0]!;
    // Followed by the one follow job, queued with the watch, to look a second after it opened.
    expect(watch.look_at.getTime()).toBeGreaterThan(watch.created_at.getTime());
    const { rows: jobs } = await sql<{ key: string; queue_name: string }>`
      select key, queue_name from graphile_worker.jobs where task_identifier = 'finality_follow'`.execute(db);
    expect(jobs).toEqual([{ key: 'finality_follow', queue_name: 'finality_follow' }]);
    const targets = reachable<Finality>(FINALITY_MOVES);
    for (const { from, to, allowed } of everyPair<Finality>(FINALITY_MOVES)) {
      await db.updateTable('finality_watches').set({ finality: from }).where('id', '=', watch.id).execute();
      if (!targets.has(to)) {
        await expect(moveFinalityWatch(db, watch.id, to)).rejects.toThrow(/nothing may move to/);
        continue;
      }
      expect((await moveFinalityWatch(db, watch.id, to)) !== undefined, `${from} -> ${to}`).toBe(allowed);
      const row = await db
        .selectFrom('finality_watches')
        .select('finality')
        .where('id', '=', watch.id)
        .executeTakeFirstOrThrow();
      expect(row.finality, `${from} -> ${to}`).toBe(allowed ? to : from);
    }
  });
});

function outcome(status: StoredWebhookStatus): WebhookOutcome {
  return { status: status as WebhookOutcome['status'], message: `ended as ${status}` };
}

describe('webhook records: completeWebhook', () => {
  it('moves a record from exactly the statuses WEBHOOK_MOVES allows, from every status', async () => {
    const id = await db.transaction().execute((tx) => openWebhook(tx, { kind: 'relay_refund', message: 'in flight' }));
    const targets = reachable<StoredWebhookStatus>(WEBHOOK_MOVES);
    for (const { from, to, allowed } of everyPair<StoredWebhookStatus>(WEBHOOK_MOVES)) {
      await db.updateTable('webhooks').set({ status: from }).where('id', '=', id).execute();
      const complete = db.transaction().execute((tx) => completeWebhook(tx, id, outcome(to)));
      if (!targets.has(to)) {
        await expect(complete).rejects.toThrow(/nothing may move to/);
        continue;
      }
      expect(await complete, `${from} -> ${to}`).toBe(allowed);
      const row = await db.selectFrom('webhooks').select('status').where('id', '=', id).executeTakeFirstOrThrow();
      expect(row.status, `${from} -> ${to}`).toBe(allowed ? to : from);
    }
  });
});

const CHOICE: PaymentChoice = {
  requirements: {
    scheme: 'exact',
    network: 'base-sepolia',
    maxAmountRequired: '12345',
    resource: 'http://target.test/paid',
    description: 'paid',
    mimeType: 'application/json',
    payTo: '0x1111111111111111111111111111111111111111',
    maxTimeoutSeconds: 60,
    asset: USDC,
  },
  index: 0,
  network: 'base-sepolia',
  chainType: 'evm',
  networkClass: 'testnet',
  amountMicroUsdc: 12_345n,
};

describe('proxy payments (each the reservation of its credits): the write functions and the database functions behind them', () => {
  let account: TestAccount;
  beforeAll(async () => {
    account = await createTestAccount(db, { credits: 1_000_000n });
  });

  async function newProxyPayment(): Promise<string> {
    const reference = hex32();
    const held = await holdProxyPayment(db, {
      reference,
      key: { ...account, dailyCapCredits: 1_000_000n, policy: NO_POLICY },
      requestId: 'req',
      targetUrl: 'http://target.test/paid',
      choice: CHOICE,
      credits: 10n,
      day: '2029-01-02',
      accountDailyLimitCredits: 1_000_000n,
      systemDailyLimitCredits: 1_000_000_000n,
    });
    expect(held.ok).toBe(true);
    return reference;
  }

  const MOVES: Record<Exclude<ProxyPaymentState, 'reserved'>, ProxyMove> = {
    signed: {
      to: 'signed',
      payer: PAYER,
      payerSignature: null,
      validBefore: 1_900_000_000n,
      lastValidBlockHeight: null,
    },
    charged: { to: 'charged', txHash: `0x${'cd'.repeat(32)}`, outcome: 'on chain' },
    released: { to: 'released', outcome: 'expired' },
  };

  it('moveProxyPayment (charge_proxy_payment and release_proxy_payment included) moves from exactly the states PROXY_MOVES allows', async () => {
    const reference = await newProxyPayment();
    const targets = reachable<ProxyPaymentState>(PROXY_MOVES);
    for (const { from, to, allowed } of everyPair<ProxyPaymentState>(PROXY_MOVES)) {
      await db.updateTable('proxy_payments').set({ state: from }).where('reference', '=', reference).execute();
      if (to === 'reserved') {
        expect(targets.has(to)).toBe(false);
        await expect(moveProxyPayment(db, reference, { to: 'reserved' } as never)).rejects.toThrow(
          /nothing may move to/,
        );
        continue;
      }
      expect(await moveProxyPayment(db, reference, MOVES[to]), `${from} -> ${to}`).toBe(allowed);
      const row = await db
        .selectFrom('proxy_payments')
        .select('state')
        .where('reference', '=', reference)
        .executeTakeFirstOrThrow();
      expect(row.state, `${from} -> ${to}`).toBe(allowed ? to : from);
    }
  });

  it('charge_proxy_payment and release_proxy_payment end the record only from the statuses WEBHOOK_MOVES allows', async () => {
    const ends: Record<'charged' | 'released', StoredWebhookStatus> = {
      charged: 'success',
      released: 'payment_failed',
    };
    for (const to of ['charged', 'released'] as const) {
      for (const status of Object.keys(WEBHOOK_MOVES) as StoredWebhookStatus[]) {
        const reference = await newProxyPayment();
        await db.updateTable('proxy_payments').set({ state: 'signed' }).where('reference', '=', reference).execute();
        const webhookId = await db
          .transaction()
          .execute((tx) => openWebhook(tx, { kind: 'proxy_payment', message: 'watching' }));
        await db.updateTable('webhooks').set({ status }).where('id', '=', webhookId).execute();
        await db
          .updateTable('proxy_payments')
          .set({ webhook_id: webhookId })
          .where('reference', '=', reference)
          .execute();
        expect(await moveProxyPayment(db, reference, MOVES[to])).toBe(true);
        const row = await db
          .selectFrom('webhooks')
          .select('status')
          .where('id', '=', webhookId)
          .executeTakeFirstOrThrow();
        const allowed = (WEBHOOK_MOVES[status] as readonly StoredWebhookStatus[]).includes(ends[to]);
        expect(row.status, `${status} -> ${ends[to]}`).toBe(allowed ? ends[to] : status);
      }
    }
  });
});
