// A facilitator that requires authentication, as Coinbase's does on mainnets: the local x402
// version 2 facilitator behind a gate (devnet/facilitator/authGate.ts) that checks a CDP JWT as CDP
// does (ES256 signed with the key pair made here, kid and sub the key id, iss cdp, nbf and exp, the
// uri "METHOD host/path") or a header set, and answers 401 otherwise, under Coinbase's path
// prefix. The service signs a JWT per call through @coinbase/x402 from CDP_API_KEY_ID and
// CDP_API_KEY_SECRET, or sends FACILITATOR_HEADERS. With them a paid /relay settles through the
// facilitator (read from the chain); without them, or with a wrong key, the start stops naming the
// variable; a key revoked while running loses no money, and the operator hears of it at error and
// in /metrics. The client is the unmodified x402-fetch; every answer is checked against the document.
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { createPublicClient, http, type Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { startFacilitatorAuthGate, type FacilitatorAuthGate } from '../../devnet/facilitator/authGate';
import { caip2Of } from '../../payments/basics/networkTable';
import { ConfigError, loadConfig } from '../../payments/basics/config';
import { startService } from '../../server/service';
import { growth } from '../support/metrics';
import { peersEnv } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';
const KEY_ID = 'organizations/0a1b2c3d-local/apiKeys/4e5f6a7b-local';
const HEADER_SECRET = 'hdr-secret-3c9f1e7a5b';

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

function ecKeyPair(): { publicKey: KeyObject; pkcs8: string; sec1: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return {
    publicKey,
    pkcs8: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    sec1: privateKey.export({ format: 'pem', type: 'sec1' }).toString(),
  };
}

let peers: Peers;
let cdpGate: FacilitatorAuthGate;
let headerGate: FacilitatorAuthGate;
const key = ecKeyPair();
const otherKey = ecKeyPair();

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], v2Targets: false });
  cdpGate = await startFacilitatorAuthGate({
    upstream: peers.facilitatorV2.url,
    credentials: { kind: 'cdp', keyId: KEY_ID, publicKey: key.publicKey },
  });
  headerGate = await startFacilitatorAuthGate({
    upstream: peers.facilitatorV2.url,
    credentials: { kind: 'headers', headers: { 'X-Api-Key': HEADER_SECRET } },
  });
});

afterAll(async () => {
  await ifStarted(cdpGate)?.close();
  await ifStarted(headerGate)?.close();
  await ifStarted(peers)?.stop();
});

function logSink(lines: LogLine[]) {
  return pino(
    { level: 'info' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as LogLine);
        done();
      },
    }),
  );
}

/** The start with this environment: the ConfigError it stopped with (it must stop before the database). */
async function startError(env: Record<string, string>): Promise<ConfigError> {
  const config = loadConfig({
    ...peersEnv(peers),
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: 'postgres://127.0.0.1:9/never-reached',
    ...env,
  });
  const started = await startService(config, { logger: pino({ level: 'silent' }) }).then(
    async (service) => {
      await service.stop();
      return undefined;
    },
    (error: unknown) => error,
  );
  expect(started).toBeInstanceOf(ConfigError);
  return started as ConfigError;
}

async function legs() {
  return {
    client: await peers.usdcBalance(NETWORK, peers.wallets.client.evm.address),
    service: await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address),
  };
}

async function paidRelay(t: TestService) {
  return payingFetch(peers, NETWORK)(
    `${t.service.url}/relay`,
    relayRequest({ api_url: `${peers.targets[NETWORK]!.url}/paid`, method: 'GET' }),
  );
}

/** A paid /relay that settled through the facilitator: 200, its /settle answered with our transaction, mined. */
async function expectSettledThroughFacilitator(t: TestService) {
  const before = await legs();
  const calls = peers.facilitatorV2.calls.length;
  const response = await paidRelay(t);
  expect(response.status).toBe(200);
  const transaction = response.headers.get('x-client-payment') as Hex;
  expect(transaction).toMatch(/^0x[0-9a-f]{64}$/);
  const settles = peers.facilitatorV2.calls.slice(calls).filter((call) => call.path === '/settle');
  expect(settles).toHaveLength(1);
  expect(settles[0]).toMatchObject({ network: caip2Of(NETWORK), answer: { success: true, transaction } });
  // From the chain: the facilitator's transaction succeeded and moved the client's money to us.
  const chain = createPublicClient({ transport: http(peers.rpcUrls[NETWORK]) });
  expect((await chain.getTransactionReceipt({ hash: transaction })).status).toBe('success');
  const after = await legs();
  expect(after.client).toBeLessThan(before.client);
  expect(after.service).toBeGreaterThan(before.service - (before.client - after.client));
  const [row] = (await relayRows(t.database.handle.db)).slice(-1);
  expect(row).toMatchObject({ state: 'delivered', client_tx_hash: transaction });
}

describe('a facilitator that requires a CDP API key', () => {
  let t: TestService;
  const logs: LogLine[] = [];
  afterAll(async () => {
    await ifStarted(t)?.stop();
  });

  it('with the right key: every call carries a JWT for its own method and path, and a paid /relay settles', async () => {
    cdpGate.setCredentials({ kind: 'cdp', keyId: KEY_ID, publicKey: key.publicKey });
    cdpGate.calls.length = 0;
    t = await startTestService(
      {
        ...peersEnv(peers),
        FACILITATOR_URL: cdpGate.facilitatorUrl,
        CDP_API_KEY_ID: KEY_ID,
        // As a .env file holds a downloaded key: SEC1, its line breaks written as \n.
        CDP_API_KEY_SECRET: key.sec1.trim().replace(/\n/g, '\\n'),
      },
      { logger: logSink(logs) },
    );
    expect(logs.find((line) => line.msg === 'the facilitator accepts our credentials')).toMatchObject({
      credentials: ['CDP_API_KEY_ID', 'CDP_API_KEY_SECRET'],
    });
    await expectSettledThroughFacilitator(t);
    const judged = cdpGate.calls.map(({ method, path, refused }) => ({ method, path, refused }));
    expect(judged).toContainEqual({ method: 'GET', path: '/platform/v2/x402/supported', refused: undefined });
    expect(judged).toContainEqual({ method: 'POST', path: '/platform/v2/x402/settle', refused: undefined });
    expect(judged.filter((call) => call.refused !== undefined)).toEqual([]);
  });

  it('with the key revoked while running: the facilitator refuses, no money moves, and the operator hears of it', async () => {
    const metricsBefore = (await t.client.get('/metrics')).text;
    cdpGate.setCredentials({ kind: 'cdp', keyId: KEY_ID, publicKey: otherKey.publicKey });
    cdpGate.calls.length = 0;
    logs.length = 0;
    const before = await legs();
    const settles = peers.facilitatorV2.calls.length;

    const response = await paidRelay(t);
    // The rule for every facilitator refusal: a 4xx is no proof that nothing was paid. The chain
    // shows nothing, so the record stays open for the job (a 502 naming it), never a bare refusal.
    expect(response.status).toBe(502);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body.message).toContain('the facilitator declined it (facilitator_http_401); the chain decides');
    expect(response.headers.get('x-service-webhook')).toMatch(/^[0-9a-f-]{36}$/);
    expect(await legs()).toEqual(before);
    expect(peers.facilitatorV2.calls.slice(settles)).toEqual([]);
    expect(cdpGate.calls).toContainEqual({
      method: 'POST',
      path: '/platform/v2/x402/settle',
      refused: 'bad signature',
    });
    const [row] = (await relayRows(t.database.handle.db)).slice(-1);
    expect(row).toMatchObject({ state: 'settling', client_tx_hash: null });

    expect(logs.find((line) => line.level === 50 && line.status === 401)).toMatchObject({
      network: NETWORK,
      msg: 'the facilitator (FACILITATOR_URL) refused our credentials with 401: check CDP_API_KEY_ID, CDP_API_KEY_SECRET',
    });
    const metricsAfter = (await t.client.get('/metrics')).text;
    expect(
      growth(metricsBefore, metricsAfter)('prs_facilitator_credentials_refused_total{path="/settle",status="401"}'),
    ).toBe(1);
    // The secret is never written anywhere the operator reads.
    const secretLine = key.pkcs8.split('\n')[1]!;
    expect(JSON.stringify(logs)).not.toContain(secretLine);
    expect(metricsAfter).not.toContain(secretLine);
  });

  it('without a key, or with a wrong one, the start stops naming the variables', async () => {
    cdpGate.setCredentials({ kind: 'cdp', keyId: KEY_ID, publicKey: key.publicKey });
    const missing = await startError({ FACILITATOR_URL: cdpGate.facilitatorUrl });
    expect(missing.variable).toBe('FACILITATOR_URL');
    expect(missing.message).toBe(
      'FACILITATOR_URL: the facilitator (FACILITATOR_URL) refused us with 401: it requires authentication; set CDP_API_KEY_ID and CDP_API_KEY_SECRET (Coinbase) or FACILITATOR_HEADERS',
    );

    const wrong = await startError({
      FACILITATOR_URL: cdpGate.facilitatorUrl,
      CDP_API_KEY_ID: KEY_ID,
      CDP_API_KEY_SECRET: otherKey.pkcs8,
    });
    expect(wrong.variable).toBe('CDP_API_KEY_ID');
    expect(wrong.message).toBe(
      'CDP_API_KEY_ID: the facilitator (FACILITATOR_URL) refused our credentials with 401: check CDP_API_KEY_ID, CDP_API_KEY_SECRET',
    );
    // A JWT for another key id is refused too, though its signature is good.
    const otherId = await startError({
      FACILITATOR_URL: cdpGate.facilitatorUrl,
      CDP_API_KEY_ID: `${KEY_ID}-other`,
      CDP_API_KEY_SECRET: key.pkcs8,
    });
    expect(otherId.variable).toBe('CDP_API_KEY_ID');
    expect(cdpGate.calls.slice(-1)).toEqual([
      { method: 'GET', path: '/platform/v2/x402/supported', refused: 'kid is not the key id' },
    ]);
  });
});

describe('a facilitator that requires a header set', () => {
  it('FACILITATOR_HEADERS: a paid /relay settles; without them or with a wrong value the start stops', async () => {
    const t = await startTestService({
      ...peersEnv(peers),
      FACILITATOR_URL: headerGate.facilitatorUrl,
      FACILITATOR_HEADERS: JSON.stringify({ 'X-Api-Key': HEADER_SECRET }),
    });
    try {
      await expectSettledThroughFacilitator(t);
      expect(headerGate.calls.filter((call) => call.refused !== undefined)).toEqual([]);
      expect(headerGate.calls).toContainEqual({ method: 'POST', path: '/platform/v2/x402/settle', refused: undefined });
    } finally {
      await t.stop();
    }
    expect((await startError({ FACILITATOR_URL: headerGate.facilitatorUrl })).variable).toBe('FACILITATOR_URL');
    const wrong = await startError({
      FACILITATOR_URL: headerGate.facilitatorUrl,
      FACILITATOR_HEADERS: '{"X-Api-Key": "not-the-secret"}',
    });
    expect(wrong.message).toBe(
      'FACILITATOR_HEADERS: the facilitator (FACILITATOR_URL) refused our credentials with 401: check FACILITATOR_HEADERS',
    );
    expect(wrong.message).not.toContain('not-the-secret');
  });
});
