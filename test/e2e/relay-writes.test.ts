// What a paid /relay writes, and in which order, against the local peers: the row is admitted
// already claimed for settling, the client's settlement and our signed payment to the target are
// one write, the delivery another. Our payment is signed before anything of the client's moves, so
// one we cannot make (our wallet short on another network) leaves the client's payment unsettled;
// on the client's own network its settlement may still fund ours, as it always could.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { utcDay } from '../../payments/basics/clock';
import { spentOn } from '../../payments/accounts/limits';
import { startPeers, type NetworkName, type Peers } from '../../devnet/index';
import { payingFetch, relayRequest } from '../support/relay';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** ceil(12,345 x 1.03) */
const TOTAL = 12_716n;
/** Less than one price: our wallet cannot pay a target from its own float. */
const SERVICE_FLOAT = 5_000n;

let peers: Peers;
let direct: TestService;
let viaFacilitator: TestService;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base-sepolia', 'skale-base-sepolia'],
    pricesMicroUsdc: { paid: PRICE },
    funding: { serviceMicroUsdc: SERVICE_FLOAT },
  });
  // Our wallet holds a float on base-sepolia; on skale-base-sepolia less than one price.
  await peers.mint('base-sepolia', peers.wallets.service.evm.address, 1_000_000n);
  direct = await startProxyService(peers);
  viaFacilitator = await startProxyService(peers, { FACILITATOR_URL: peers.facilitator.url });
  for (const t of [direct, viaFacilitator]) await recordWrites(t.database.handle.db);
});

afterAll(async () => {
  await ifStarted(viaFacilitator)?.stop();
  await ifStarted(direct)?.stop();
  await ifStarted(peers)?.stop();
});

/** A trigger of this test's database that keeps every insert and every update of a relay row's state or target payment. */
async function recordWrites(db: Db): Promise<void> {
  await sql`create table relay_writes (
    seq bigserial primary key, relay_transaction_id bigint, op text, state text, settle_method text, target_payment_ref text)`.execute(
    db,
  );
  await sql`create function keep_relay_write() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' or old.state is distinct from new.state
        or old.target_payment_ref is distinct from new.target_payment_ref then
        insert into relay_writes (relay_transaction_id, op, state, settle_method, target_payment_ref)
          values (new.id, tg_op, new.state, new.settle_method, new.target_payment_ref);
      end if;
      return null;
    end $$`.execute(db);
  await sql`create trigger keep_relay_write after insert or update on relay_transactions
    for each row execute function keep_relay_write()`.execute(db);
}

async function writesOf(db: Db, id: bigint) {
  const { rows } = await sql<{ op: string; state: string; settle_method: string | null; target: boolean }>`
    select op, state, settle_method, target_payment_ref is not null as target
      from relay_writes where relay_transaction_id = ${id} order by seq`.execute(db);
  return rows;
}

const usdc = (network: NetworkName, owner: string) => peers.usdcBalance(network, owner);

async function rowPaidBy(db: Db, payer: string) {
  return db
    .selectFrom('relay_transactions')
    .selectAll()
    .where('payer', '=', payer)
    .orderBy('id', 'desc')
    .executeTakeFirstOrThrow();
}

/** The paying wallet's relay spend of today on the testnets, as the daily limits read it. */
function relaySpent(db: Db, payer: string): Promise<bigint> {
  return spentOn(db, { scope: 'relay_wallet', scopeId: payer, networkClass: 'testnet', day: utcDay(new Date()) });
}

describe.each([
  ['settled by our wallet', () => direct, 'direct'],
  ['settled through the facilitator', () => viaFacilitator, 'facilitator'],
] as const)('a paid relay %s', (_, service, method) => {
  it('admitted settling, settled with our payment to the target in the same write, delivered: three writes', async () => {
    const t = service();
    const network = 'base-sepolia';
    const payTo = peers.targets[network]!.routes.paid.payTo;
    const client = peers.wallets.client.evm.address;
    const before = { client: await usdc(network, client), target: await usdc(network, payTo) };

    const res = await payingFetch(peers, network)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: peers.targets[network]!.routes.paid.url, method: 'GET' }),
    );

    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ route: 'paid', network });
    expect(await usdc(network, client)).toBe(before.client - TOTAL);
    expect(await usdc(network, payTo)).toBe(before.target + PRICE);
    const db = t.database.handle.db;
    const row = await rowPaidBy(db, client);
    expect(row).toMatchObject({
      state: 'delivered',
      settle_method: method,
      client_tx_hash: res.headers.get('x-client-payment'),
    });
    expect(await writesOf(db, row.id)).toEqual([
      { op: 'INSERT', state: 'settling', settle_method: method, target: false },
      { op: 'UPDATE', state: 'settled', settle_method: method, target: true },
      { op: 'UPDATE', state: 'delivered', settle_method: method, target: true },
    ]);
  });

  it('our wallet short on the target’s network: a 502 saying nothing was charged, the client’s payment never settled, its limit given back', async () => {
    const t = service();
    const targetNetwork = 'skale-base-sepolia';
    const ours = peers.wallets.service.evm.address;
    const float = await usdc(targetNetwork, ours);
    expect(float).toBeLessThan(PRICE);
    const client = peers.wallets.client.evm.address;
    const clientBefore = await usdc('base-sepolia', client);
    const spentBefore = await relaySpent(service().database.handle.db, client);

    const key = { 'idempotency-key': `short-${method}` };
    const body = { api_url: peers.targets[targetNetwork]!.routes.paid.url, method: 'GET', network: 'base-sepolia' };
    const res = await payingFetch(peers, 'base-sepolia')(`${t.service.url}/relay`, relayRequest(body, key));

    expect(res.status).toBe(502);
    const answer = (await res.json()) as { code: string; message: string };
    expect(answer).toMatchObject({ code: 'upstream_error' });
    expect(answer.message).toMatch(/insufficient_funds.*nothing was charged/);
    expect(res.headers.get('x-client-payment')).toBeNull();
    expect(await usdc('base-sepolia', client)).toBe(clientBefore);
    expect(await usdc(targetNetwork, ours)).toBe(float);
    const db = t.database.handle.db;
    const row = await rowPaidBy(db, client);
    expect(row).toMatchObject({
      state: 'settle_failed',
      failure_reason: 'target_not_payable',
      client_tx_hash: null,
      target_payment_ref: null,
      spend_day: null,
    });
    expect(await relaySpent(db, client)).toBe(spentBefore);
    expect(await writesOf(db, row.id)).toEqual([
      { op: 'INSERT', state: 'settling', settle_method: method, target: false },
      { op: 'UPDATE', state: 'settle_failed', settle_method: method, target: false },
    ]);

    // Nothing was charged, so the answer is not kept: a retry under the key runs again with its new payment.
    const retry = await payingFetch(peers, 'base-sepolia')(`${t.service.url}/relay`, relayRequest(body, key));
    expect(retry.status).toBe(502);
    expect((await rowPaidBy(db, client)).id).toBeGreaterThan(row.id);
    expect(await usdc('base-sepolia', client)).toBe(clientBefore);
  });

  it('short on the client’s own network: the client’s settlement funds our payment, signed and recorded after it', async () => {
    const t = service();
    const network = 'skale-base-sepolia';
    const ours = peers.wallets.service.evm.address;
    expect(await usdc(network, ours)).toBeLessThan(PRICE);
    const payTo = peers.targets[network]!.routes.paid.payTo;
    const client = peers.wallets.client.evm.address;
    const before = { client: await usdc(network, client), target: await usdc(network, payTo) };

    const res = await payingFetch(peers, network)(
      `${t.service.url}/relay`,
      relayRequest({ api_url: peers.targets[network]!.routes.paid.url, method: 'GET', network }),
    );

    expect(res.status).toBe(200);
    expect(await usdc(network, client)).toBe(before.client - TOTAL);
    expect(await usdc(network, payTo)).toBe(before.target + PRICE);
    const db = t.database.handle.db;
    const row = await rowPaidBy(db, client);
    expect(row).toMatchObject({ state: 'delivered', target_network: network });
    expect(await writesOf(db, row.id)).toEqual([
      { op: 'INSERT', state: 'settling', settle_method: method, target: false },
      { op: 'UPDATE', state: 'settled', settle_method: method, target: false },
      { op: 'UPDATE', state: 'settled', settle_method: method, target: true },
      { op: 'UPDATE', state: 'delivered', settle_method: method, target: true },
    ]);
  });
});
