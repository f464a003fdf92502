// The floors of /relay and /proxy: once the service wallet is drained on a local chain (a real
// transfer of its whole stablecoin away, or its gas set to 0), the float job's next reading puts
// the network under its floor and a paid call there is refused with 503 float_below_floor or
// gas_below_floor naming the network, before anything of the client's moves: no credits held on
// /proxy, and on /relay a client's signed payment is never settled (its USDC balance, read from
// the chain, is unchanged). Every answer is checked against the document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../db/index';
import { startPeers, type Peers, type PaymentRequirements as PeerRequirements } from '../../devnet/index';
import { drainLocalEvmWallet } from '../../devnet/drain';
import { organisationBalance } from '../../payments/accounts/credits';
import { createTestAccount } from '../support/accounts';
import { sample } from '../support/metrics';
import { ledgerSums, startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const PRICE = 12_345n;
/** Generous: the float job runs every second, on a loaded machine. */
const READING_TIMEOUT_MS = 60_000;

let peers: Peers;
let t: TestService;
let db: Db;

beforeAll(async () => {
  peers = await startPeers({
    networks: ['base', 'base-sepolia'],
    v2Targets: false,
    pricesMicroUsdc: { paid: PRICE },
  });
  t = await startProxyService(peers, {
    FLOAT_REFRESH_SECONDS: '1',
    // base is a mainnet: its float floor is 10 USDC by default; set here as a reader would.
    FLOAT_FLOOR_USDC_BASE: '10',
    GAS_FLOOR_BASE_SEPOLIA: '0.5',
  });
  db = t.database.handle.db;
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  await ifStarted(peers)?.stop();
});

async function metrics(): Promise<string> {
  const res = await t.client.get('/metrics');
  expect(res.status).toBe(200);
  return res.text;
}

/** Polls GET /metrics until the series has this value (the float job's reading, as every instance shows it). */
async function untilMetric(series: string, value: number): Promise<void> {
  const deadline = Date.now() + READING_TIMEOUT_MS;
  for (;;) {
    const seen = sample(await metrics(), series);
    if (seen === value) return;
    if (Date.now() > deadline) throw new Error(`${series} stayed ${String(seen)}, not ${value}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** The relay's 402 for a paid route of a target, and an X-PAYMENT the harness's client signed for it. */
async function signedRelayPayment(network: 'base' | 'base-sepolia') {
  const body = { api_url: peers.targets[network]!.routes.paid.url, method: 'GET' };
  const unpaid = await t.client.post('/relay', body);
  expect(unpaid.status).toBe(402);
  const offer = (unpaid.body.accepts as PeerRequirements[]).find((entry) => entry.network === network)!;
  const { header } = await peers.signEvmPayment(offer);
  return { body, header };
}

async function relayRows(): Promise<number> {
  const rows = await db.selectFrom('relay_transactions').select('id').execute();
  return rows.length;
}

describe('a network whose float is under its floor', () => {
  it('refuses /proxy and /relay with 503 float_below_floor before any money of the client moves', async () => {
    const network = 'base';
    const target = peers.targets[network]!;
    const service = peers.wallets.service.evm.address;
    const client = peers.wallets.client.evm.address;
    await untilMetric(`prs_wallet_below_floor{network="${network}",kind="float"}`, 0);

    // Funded, a paid call goes through.
    const { key, organisationId } = await createTestAccount(db, { credits: 1_000n });
    const paid = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(paid.status).toBe(200);
    const creditsBefore = await organisationBalance(db, organisationId);
    const ledgerBefore = await ledgerSums(db, organisationId);
    // A client's payment signed while the service could still pay.
    const relay = await signedRelayPayment(network);

    const drained = await drainLocalEvmWallet(network, peers.rpcUrls[network]!, peers.wallets.service.evm.privateKey);
    expect(drained.asset).toBeGreaterThan(0n);
    expect(await peers.usdcBalance(network, service)).toBe(0n);
    await untilMetric(`prs_wallet_below_floor{network="${network}",kind="float"}`, 1);
    expect(sample(await metrics(), `prs_wallet_float_micro_usdc{network="${network}"}`)).toBe(0);
    expect(sample(await metrics(), `prs_wallet_float_floor_micro_usdc{network="${network}"}`)).toBe(10_000_000);

    target.reset();
    const refused = await t.client.post(
      '/proxy',
      { api_url: target.routes.paid.url, method: 'GET' },
      { headers: { 'x-api-key': key } },
    );
    expect(refused.status).toBe(503);
    expect(refused.body).toEqual({
      code: 'float_below_floor',
      error: 'Service Unavailable',
      network,
      details: expect.stringMatching(
        /float on base \(0(\.0+)? USDC, read \d+ s ago\) is below its floor of 10 \(FLOAT_FLOOR_USDC_BASE\)/,
      ),
    });
    expect(refused.headers.get('retry-after')).toBe('1');
    // The target was asked for its price only; no credits were held or charged.
    expect(target.requests.map((request) => request.payment)).toEqual([null]);
    expect(await organisationBalance(db, organisationId)).toBe(creditsBefore);
    expect(await ledgerSums(db, organisationId)).toEqual(ledgerBefore);

    const clientBefore = await peers.usdcBalance(network, client);
    const rowsBefore = await relayRows();
    const relayed = await t.client.post('/relay', relay.body, { headers: { 'x-payment': relay.header } });
    expect(relayed.status).toBe(503);
    expect(relayed.body).toMatchObject({ code: 'float_below_floor', network });
    // The client's signed payment was never settled: its balance on the chain is unchanged, nothing was recorded.
    expect(await peers.usdcBalance(network, client)).toBe(clientBefore);
    expect(await peers.usdcBalance(network, service)).toBe(0n);
    expect(await relayRows()).toBe(rowsBefore);
    // Without a payment: the 503 too, not a 402 to pay.
    const unpaid = await t.client.post('/relay', relay.body);
    expect(unpaid.status).toBe(503);
    expect(unpaid.body).toMatchObject({ code: 'float_below_floor', network });
  });
});

describe('a network whose gas is under its floor', () => {
  it('refuses /relay with 503 gas_below_floor, the client paying nothing', async () => {
    const network = 'base-sepolia';
    const client = peers.wallets.client.evm.address;
    await untilMetric(`prs_wallet_below_floor{network="${network}",kind="gas"}`, 0);
    const relay = await signedRelayPayment(network);

    const drained = await drainLocalEvmWallet(network, peers.rpcUrls[network]!, peers.wallets.service.evm.privateKey, {
      asset: false,
      gas: true,
    });
    expect(drained.gas).toBeGreaterThan(0n);
    await untilMetric(`prs_wallet_below_floor{network="${network}",kind="gas"}`, 1);
    expect(sample(await metrics(), `prs_wallet_below_floor{network="${network}",kind="float"}`)).toBe(0);
    // The refusal reads the floors through a cache of up to a second: an unpaid call (nothing can
    // move) shows when it has the new reading.
    const deadline = Date.now() + 30_000;
    while ((await t.client.post('/relay', relay.body)).status !== 503) {
      if (Date.now() > deadline) throw new Error('an unpaid /relay was never refused for gas');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }

    const clientBefore = await peers.usdcBalance(network, client);
    const relayed = await t.client.post('/relay', relay.body, { headers: { 'x-payment': relay.header } });
    expect(relayed.status).toBe(503);
    expect(relayed.body).toEqual({
      code: 'gas_below_floor',
      error: 'Service Unavailable',
      network,
      details: expect.stringMatching(
        /gas on base-sepolia \(0 native gas token.*\) is below its floor of 0\.5 \(GAS_FLOOR_BASE_SEPOLIA\)/,
      ),
    });
    expect(await peers.usdcBalance(network, client)).toBe(clientBefore);
  });
});
