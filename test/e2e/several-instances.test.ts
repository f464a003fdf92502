// Two API instances (RUN_WORKER=false) and one worker on one Postgres and one local chain, all with
// the same EVM_PRIVATE_KEY, as the README invites. Each instance has its own pool and its own
// submission queue, as separate processes would; only Postgres is shared. 100 paid relays spread
// over both instances at once make our wallet submit 100 settlements concurrently from two
// places (without a lock across instances they take the same account nonce), and 100 paid /proxy
// calls run beside them. Every call succeeds, every on-chain leg is exact, and no record is left
// open.
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { loadConfig } from '../../payments/basics/config';
import { proxyCredits } from '../../payments/accounts/fees';
import { startService, type Service } from '../../server/service';
import { createTestAccount } from '../support/accounts';
import { contractClient } from '../support/contract';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { peersEnv } from '../support/proxy';
import { tableResolver } from '../support/resolver';
import { payingFetch, relayRequest } from '../support/relay';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const PRICE = 10_000n;
/** The relay's 3% fee on top. */
const RELAY_TOTAL = 10_300n;
const RELAYS = 100;
const PROXY_CALLS = 100;

let peers: Peers;
let database: TestDatabase;
const services: Service[] = [];

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], pricesMicroUsdc: { paid: PRICE } });
  database = await createTestDatabase();
  const env = {
    ...peersEnv(peers),
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'silent',
    SHUTDOWN_GRACE_MS: '2000',
    CAP_RELAY: '200',
    CAP_PROXY: '200',
    // Three processes on one Postgres: their pools together stay well below its max_connections,
    // which other test files running at the same time share.
    DATABASE_POOL_MAX: '8',
  };
  const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  for (let instance = 0; instance < 2; instance += 1) {
    services.push(
      await startService(loadConfig({ ...env, RUN_WORKER: 'false' }), { logger, resolver: tableResolver() }),
    );
  }
  services.push(
    await startService(loadConfig({ ...env, RUN_WORKER: 'true' }), {
      logger,
      resolver: tableResolver(),
      serveHttp: false,
    }),
  );
}, 60_000);

afterAll(async () => {
  for (const service of services) await service.stop();
  await ifStarted(database)?.drop();
  await ifStarted(peers)?.stop();
});

describe('two API instances and a worker sharing one wallet', () => {
  it(`${RELAYS} paid relays and ${PROXY_CALLS} paid proxy calls at once: all succeed, every leg exact, nothing open`, async () => {
    const [first, second] = services;
    if (!first || !second) throw new Error('the instances did not start');
    const db = database.handle.db;
    const target = peers.targets[NETWORK]!;
    const payTo = target.routes.paid.payTo;
    const client = peers.wallets.client.evm.address;
    const wallet = peers.wallets.service.evm.address;
    const credits = proxyCredits(PRICE, 3).totalCredits;
    const account = await createTestAccount(db, { credits: BigInt(PROXY_CALLS) * credits });
    const before = {
      client: await peers.usdcBalance(NETWORK, client),
      wallet: await peers.usdcBalance(NETWORK, wallet),
      target: await peers.usdcBalance(NETWORK, payTo),
    };

    const pay = payingFetch(peers, NETWORK);
    const instanceUrl = (index: number) => (index % 2 === 0 ? first.url : second.url);
    const relays = Array.from({ length: RELAYS }, (_, index) =>
      pay(`${instanceUrl(index)}/relay`, relayRequest({ api_url: target.routes.paid.url, method: 'GET' })).then(
        async (response) => ({ status: response.status, body: await response.text() }),
      ),
    );
    const proxies = Array.from({ length: PROXY_CALLS }, (_, index) =>
      contractClient(instanceUrl(index + 1)).post(
        '/proxy',
        { api_url: target.routes.paid.url, method: 'GET' },
        { headers: { 'x-api-key': account.key } },
      ),
    );
    const [relayAnswers, proxyAnswers] = await Promise.all([Promise.all(relays), Promise.all(proxies)]);

    const failedRelays = relayAnswers.filter((answer) => answer.status !== 200);
    expect(failedRelays, JSON.stringify(failedRelays.slice(0, 3))).toEqual([]);
    const failedProxies = proxyAnswers.filter((answer) => answer.status !== 200);
    expect(failedProxies.map((answer) => [answer.status, answer.body]).slice(0, 3)).toEqual([]);

    // Every relay settled once and was delivered; every proxy call charged once.
    const relayRows = await db.selectFrom('relay_transactions').select(['state', 'amount_micro']).execute();
    expect(relayRows).toHaveLength(RELAYS);
    expect(relayRows.filter((row) => row.state !== 'delivered')).toEqual([]);
    const proxyRows = await db.selectFrom('proxy_payments').select(['state']).execute();
    expect(proxyRows).toHaveLength(PROXY_CALLS);
    expect(proxyRows.filter((row) => row.state !== 'charged')).toEqual([]);

    // The chain agrees to the unit: the client paid price and fee per relay, the target got the
    // price per call, and our wallet kept the relay fees and paid for the proxy calls.
    const relayCount = BigInt(RELAYS);
    const proxyCount = BigInt(PROXY_CALLS);
    expect(await peers.usdcBalance(NETWORK, client)).toBe(before.client - relayCount * RELAY_TOTAL);
    expect(await peers.usdcBalance(NETWORK, payTo)).toBe(before.target + (relayCount + proxyCount) * PRICE);
    expect(await peers.usdcBalance(NETWORK, wallet)).toBe(
      before.wallet + relayCount * (RELAY_TOTAL - PRICE) - proxyCount * PRICE,
    );
    // Each relay's settlement is its own transaction from our one wallet: 100 distinct hashes.
    const hashes = await db.selectFrom('relay_transactions').select('client_tx_hash').execute();
    expect(new Set(hashes.map((row) => row.client_tx_hash)).size).toBe(RELAYS);
  }, 180_000);
});
