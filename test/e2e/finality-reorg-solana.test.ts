// Settled is not final on Solana either: the local ledger reports a transaction `confirmed` until
// it is a few slots deep (finalizationSlots), and a snapshot/revert of the ledger is a reorg that
// forgets what a paid /relay call settled. The client's transaction, whose fee payer is our wallet,
// is signed again (the same signature) and lands once; our payment to the target, whose fee payer
// is the target's facilitator, cannot be completed by us: once its blockhash expires it is lost,
// with the amount at risk, and prs_payments_lost_to_reorg_total grows. Balances are read on the
// ledger: nothing is paid twice. Every answer is checked against the document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { BLOCKHASH_VALIDITY_BLOCKS } from '../../devnet/svm/ledger';
import type { Db } from '../../db/index';
import { growth } from '../support/metrics';
import { startProxyService } from '../support/proxy';
import { paidRelayRow } from '../support/relay';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'solana-devnet';
const PRICE = 10_000n;
/** ceil(10,000 x 1.03) */
const TOTAL = 10_300n;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  peers.solanaLedgers[NETWORK]!.finalizationSlots = 8n;
  t = await startProxyService(peers);
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

const ledger = () => peers.solanaLedgers[NETWORK]!;
const payTo = () => peers.targets[NETWORK]!.routes.paid.payTo;

async function balances() {
  return {
    client: await peers.usdcBalance(NETWORK, peers.wallets.client.solana.address),
    service: await peers.usdcBalance(NETWORK, peers.wallets.service.solana.address),
    target: await peers.usdcBalance(NETWORK, payTo()),
  };
}

async function scrape(): Promise<string> {
  const response = await t.client.get('/metrics');
  expect(response.status).toBe(200);
  return response.text;
}

function watchesOf(relay: bigint) {
  return db
    .selectFrom('finality_watches')
    .selectAll()
    .where('relay_transaction_id', '=', relay)
    .orderBy('id')
    .execute();
}

/** Until `done` holds for the watches (or a bound passes; the assertions after say what was found). */
async function watchesWhen(relay: bigint, done: (watches: Awaited<ReturnType<typeof watchesOf>>) => boolean) {
  const deadline = Date.now() + 40_000;
  for (;;) {
    const watches = await watchesOf(relay);
    if (done(watches) || Date.now() > deadline) return watches;
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
}

describe('a reorg of the local Solana ledger drops both legs of a paid /relay call', () => {
  it('the client transaction is sent again and lands once; the target payment is lost once its blockhash expires', async () => {
    const before = await balances();
    const metrics = await scrape();
    const fork = ledger().snapshot();
    const row = await paidRelayRow(peers, t, NETWORK);
    const clientTx = row.client_tx_hash!;
    expect((await watchesOf(row.id)).map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'pending'],
      ['target_payment', 'pending'],
    ]);
    ledger().revert(fork);
    expect(await balances()).toEqual(before);

    const resent = await watchesWhen(row.id, (watches) => watches[0]?.finality === 'final');
    expect(resent.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'final'],
      ['target_payment', 'pending'],
    ]);
    expect(resent[0]).toMatchObject({ tx_hash: clientTx, resends: 1 });
    expect(ledger().executedTransaction(clientTx)?.err).toBeNull();

    // The cluster moves past the blockhash our payment to the target was signed with.
    for (let slot = 0n; slot <= BLOCKHASH_VALIDITY_BLOCKS; slot += 1n) ledger().advanceSlot();
    const lost = await watchesWhen(row.id, (watches) => watches[1]?.finality === 'lost');
    expect(lost.map((watch) => [watch.leg, watch.finality])).toEqual([
      ['client_settlement', 'final'],
      ['target_payment', 'lost'],
    ]);
    expect(lost[1]).toMatchObject({ amount_micro_usdc: PRICE, resends: 0 });
    expect(lost[1]!.details).toMatch(/^expired: /);
    expect(
      growth(metrics, await scrape())('prs_payments_lost_to_reorg_total{leg="target_payment",network="solana-devnet"}'),
    ).toBe(1);
    // The client paid once; the target was never paid.
    expect(await balances()).toEqual({
      client: before.client - TOTAL,
      service: before.service + TOTAL,
      target: before.target,
    });
  }, 90_000);
});
