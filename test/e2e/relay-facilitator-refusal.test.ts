// A facilitator that does not settle: /relay answers at once with what it can conclude, and says
// why at warn. The facilitator here forwards GET /supported to the local x402 facilitator and
// answers every POST /settle as a misbehaving one did: `success: false` naming a transaction our
// network does not have (it had settled on another network than it advertised), or `success: false`
// with no transaction at all, which is no refusal either (a facilitator may settle and then say so:
// test/e2e/facilitator-misleading.test.ts). The client is the unmodified x402-fetch; nothing may move.
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { peersEnv } from '../support/proxy';
import { payingFetch, relayRequest, relayRows } from '../support/relay';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const NETWORK = 'base-sepolia';

interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

let peers: Peers;
let facilitator: Server;
let facilitatorUrl: string;
let settleAnswer: Record<string, unknown> = {};
let t: TestService;
const logs: LogLine[] = [];

beforeAll(async () => {
  peers = await startPeers({ networks: [NETWORK], v2Targets: false });
  facilitator = createServer((request, response) => {
    if (request.method === 'GET' && request.url === '/supported') {
      void fetch(`${peers.facilitator.url}/supported`)
        .then((answer) => answer.text())
        .then((text) => response.writeHead(200, { 'content-type': 'application/json' }).end(text));
      return;
    }
    request.resume();
    request.on('end', () =>
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(settleAnswer)),
    );
  });
  await new Promise<void>((resolve) => facilitator.listen(0, '127.0.0.1', resolve));
  facilitatorUrl = `http://127.0.0.1:${(facilitator.address() as AddressInfo).port}`;
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) logs.push(JSON.parse(line) as LogLine);
      done();
    },
  });
  t = await startTestService(
    { ...peersEnv(peers), FACILITATOR_URL: facilitatorUrl },
    { logger: pino({ level: 'warn' }, sink) },
  );
});

afterAll(async () => {
  await ifStarted(t)?.stop();
  facilitator.closeAllConnections();
  await new Promise((resolve) => facilitator.close(resolve));
  await ifStarted(peers)?.stop();
});

async function paidRelay() {
  const client = peers.wallets.client.evm.address;
  const before = await peers.usdcBalance(NETWORK, client);
  logs.length = 0;
  const response = await payingFetch(peers, NETWORK)(
    `${t.service.url}/relay`,
    relayRequest({ api_url: `${peers.targets[NETWORK]!.url}/paid`, method: 'GET' }),
  );
  const body = (await response.json()) as Record<string, unknown>;
  return { response, body, moved: before - (await peers.usdcBalance(NETWORK, client)) };
}

describe('a facilitator answering success: false', () => {
  it('with a transaction our network does not have: a 502 at once with the record the job finishes, its reason at warn', async () => {
    const elsewhere = `0x${randomBytes(32).toString('hex')}`;
    settleAnswer = { success: false, errorReason: 'invalid_network', transaction: elsewhere, network: NETWORK };
    const { response, body, moved } = await paidRelay();

    expect(response.status).toBe(502);
    expect(body.message).toContain('the facilitator did not settle it (invalid_network)');
    const webhookId = response.headers.get('x-service-webhook');
    expect(webhookId).toMatch(/^[0-9a-f-]{36}$/);
    expect(moved).toBe(0n);
    // The named transaction is kept: the watch job reads the chain for it and for the authorization.
    const [row] = (await relayRows(t.database.handle.db)).slice(-1);
    expect(row).toMatchObject({ state: 'settling', client_tx_hash: elsewhere });
    const record = await t.client.get(`/webhooks/${webhookId}`);
    expect(record.status).toBe(202);

    expect(
      logs.find((line) => line.msg === 'the facilitator did not settle the payment; the chain decides'),
    ).toMatchObject({
      level: 40,
      errorReason: 'invalid_network',
      transaction: elsewhere,
      network: NETWORK,
    });
    expect(logs.find((line) => line.msg === 'answered 502')).toMatchObject({
      level: 40,
      status: 502,
      code: 'upstream_error',
      webhook_id: webhookId,
    });
  });

  it('with no transaction: not a refusal (it may have settled), a 502 with the record the job finishes, its reason at warn', async () => {
    settleAnswer = { success: false, errorReason: 'insufficient_funds', transaction: '', network: NETWORK };
    const { response, body, moved } = await paidRelay();
    expect(response.status).toBe(502);
    expect(body.message).toContain('the facilitator declined it (insufficient_funds); the chain decides');
    const webhookId = response.headers.get('x-service-webhook');
    expect(webhookId).toMatch(/^[0-9a-f-]{36}$/);
    expect(moved).toBe(0n);
    // Nothing on chain yet and the authorization still valid: the record stays open for the job.
    const [row] = (await relayRows(t.database.handle.db)).slice(-1);
    expect(row).toMatchObject({ state: 'settling', client_tx_hash: null });
    expect((await t.client.get(`/webhooks/${webhookId}`)).status).toBe(202);
    expect(
      logs.find((line) => line.msg === 'the facilitator did not say it settled the payment; the chain decides'),
    ).toMatchObject({
      level: 40,
      answer: 'declined',
      errorReason: 'insufficient_funds',
      network: NETWORK,
    });
  });
});
