// GET /health/live and GET /health/ready, as the document declares them. Live: the process answers
// and its event loop is not stalled. Ready: the database, the worker (where the instance runs one)
// and every enabled network's JSON-RPC endpoint, each within a short bound; 503 naming the failed
// check otherwise. The chains are JSON-RPC stand-ins served here, and the database is reached
// through a TCP forwarder this test can cut: nothing leaves 127.0.0.1.
import { createServer as createNetServer, connect, type Server as NetServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { loadConfig } from '../../payments/basics/config';
import { startService, type Service } from '../../server/service';
import { contractClient, type ContractClient } from '../support/contract';
import { createTestAccount } from '../support/accounts';
import { createTestDatabase, type TestDatabase } from '../support/database';
import { startRpcStandIn, type RpcStandIn } from '../support/rpc-stand-in';
import { startTestService, type TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

/** A TCP forwarder to Postgres that can be cut (connections dropped, new ones refused) and restored on the same port. */
class DatabaseForwarder {
  private server: NetServer | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async open(): Promise<void> {
    const server = createNetServer((client) => {
      const upstream = connect(this.targetPort, this.targetHost);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', resolve);
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

let rpc: RpcStandIn;
beforeAll(async () => {
  rpc = await startRpcStandIn();
});
afterAll(async () => {
  await ifStarted(rpc)?.stop();
});

function localChains(url: string): Record<string, string> {
  return { NETWORKS: 'base-sepolia,solana-devnet', RPC_URL_BASE_SEPOLIA: url, RPC_URL_SOLANA_DEVNET: url };
}

/**
 * The first answer of the status wanted, asked again every 200 ms: the test waits on the state it
 * expects (on a loaded machine the event loop of this process, or a reconnection, is late now and
 * then), bounded only by the test's own timeout, which names the last answer seen.
 */
async function askUntil<R extends { status: number; text?: string }>(
  ask: () => Promise<R>,
  status: number,
): Promise<R> {
  let last: R | undefined;
  const seen = (): string => (last ? `${last.status} ${last.text ?? ''}`.trim() : 'no answer yet');
  onTestFailed(() => {
    if (last?.status !== status) console.error(`waiting for ${status}; the last answer: ${seen()}`);
  });
  for (;;) {
    last = await ask();
    if (last.status === status) return last;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('GET /health/live', () => {
  /** The bound the service is started with, and how long the test blocks the event loop: well past it. */
  const MAX_DELAY_MS = 1_000;
  const BLOCK_MS = 2_500;
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService(localChains(rpc.url), { liveMaxEventLoopDelayMs: MAX_DELAY_MS });
  });
  afterAll(async () => {
    await ifStarted(t)?.stop();
  });

  const liveUntil = (status: number) => askUntil(() => t.client.get('/health/live'), status);

  it('answers 200 while the event loop runs freely', async () => {
    const response = await liveUntil(200);
    expect(response.status).toBe(200);
    expect(response.body).toEqual({
      status: 'ok',
      eventLoopDelayMs: expect.any(Number),
      maxEventLoopDelayMs: MAX_DELAY_MS,
    });
    expect(response.body.eventLoopDelayMs).toBeLessThanOrEqual(MAX_DELAY_MS);
  }, 120_000);

  it('answers 503 stalled right after the event loop was blocked past the bound, and 200 once it runs again', async () => {
    const blockedUntil = Date.now() + BLOCK_MS;
    while (Date.now() < blockedUntil) {
      // The service runs in this process: its event loop is blocked as well.
    }
    const stalled = await t.client.get('/health/live');
    expect(stalled.status).toBe(503);
    expect(stalled.body.status).toBe('stalled');
    expect(stalled.body.eventLoopDelayMs).toBeGreaterThan(MAX_DELAY_MS);
    // The delay is kept for the window it fell in and the next (a second each): the stall is
    // behind it a few seconds later, later on a loaded machine.
    expect((await liveUntil(200)).status).toBe(200);
  }, 120_000);
});

describe('GET /health/ready', () => {
  it('is ready while the database, the worker and every enabled chain answer; /health is unchanged', async () => {
    const t = await startTestService(localChains(rpc.url));
    try {
      rpc.methods.length = 0;
      const response = await t.client.get('/health/ready');
      expect(response.status).toBe(200);
      expect(response.body).toEqual({
        status: 'ready',
        checks: { database: 'ok', worker: 'ok', 'rpc:base-sepolia': 'ok', 'rpc:solana-devnet': 'ok' },
        failed: [],
      });
      // Each RPC answers, and serves its network's chain.
      expect(rpc.methods.sort()).toEqual(['eth_blockNumber', 'eth_chainId', 'getGenesisHash', 'getSlot']);
      const health = await t.client.get('/health');
      expect(health.body).toEqual({ status: 'ok', checks: { database: 'ok', worker: 'ok' } });
      // The RPC requests of the probe are timed by network in the metrics.
      const metrics = (await t.client.get('/metrics')).text;
      expect(metrics).toMatch(
        /^prs_rpc_request_duration_seconds_count\{network="base-sepolia",method="eth_blockNumber",outcome="ok"\} [1-9]/m,
      );
      expect(metrics).toMatch(
        /^prs_rpc_request_duration_seconds_count\{network="solana-devnet",method="getSlot",outcome="ok"\} [1-9]/m,
      );
    } finally {
      await t.stop();
    }
  });

  it('answers 503 naming the RPC that cannot be reached, or does not answer in time, never its URL', async () => {
    const closed = await startRpcStandIn();
    await closed.stop();
    const t = await startTestService({
      NETWORKS: 'base-sepolia,solana-devnet',
      RPC_URL_BASE_SEPOLIA: `${closed.url}/secret-key-in-path`,
      RPC_URL_SOLANA_DEVNET: rpc.url,
      RUN_WORKER: 'false',
    });
    try {
      const refused = await t.client.get('/health/ready');
      expect(refused.status).toBe(503);
      expect(refused.body.status).toBe('unavailable');
      expect(refused.body.failed).toEqual(['rpc:base-sepolia']);
      expect(refused.body.checks).toEqual({
        database: 'ok',
        'rpc:base-sepolia': expect.any(String),
        'rpc:solana-devnet': 'ok',
      });
      expect(refused.text).not.toContain('secret-key-in-path');
      expect(refused.text).not.toContain(closed.url);

      rpc.mode = 'hang';
      // Answered though the RPC never is: its check gave up at its bound (said in the check's text).
      const hanging = await t.client.get('/health/ready');
      expect(hanging.status).toBe(503);
      expect(hanging.body.failed.sort()).toEqual(['rpc:base-sepolia', 'rpc:solana-devnet']);
      expect(hanging.body.checks['rpc:solana-devnet']).toMatch(/^no answer within [0-9]+ ms$/);
    } finally {
      rpc.mode = 'answer';
      await t.stop();
    }
  });

  it('answers 503 naming the network whose RPC now serves another chain, its URL without secrets', async () => {
    const t = await startTestService({
      NETWORKS: 'base-sepolia,solana-devnet',
      RPC_URL_BASE_SEPOLIA: `http://user:pass-in-url@127.0.0.1:${new URL(rpc.url).port}/secret-key-in-path`,
      RPC_URL_SOLANA_DEVNET: rpc.url,
      RUN_WORKER: 'false',
    });
    try {
      expect((await t.client.get('/health/ready')).status).toBe(200);
      // The endpoint is moved to Base mainnet and to Solana's mainnet cluster behind the same URLs.
      rpc.chainId = 8453;
      rpc.genesisHash = '5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d';
      const moved = await t.client.get('/health/ready');
      expect(moved.status).toBe(503);
      expect(moved.body.failed.sort()).toEqual(['rpc:base-sepolia', 'rpc:solana-devnet']);
      expect(moved.body.checks['rpc:base-sepolia']).toBe(
        'RPC_URL_BASE_SEPOLIA points at http://127.0.0.1, which answers chain id 8453, but base-sepolia (Base Sepolia) is chain id 84532',
      );
      expect(moved.body.checks['rpc:solana-devnet']).toMatch(
        /^RPC_URL_SOLANA_DEVNET points at http:\/\/127\.0\.0\.1, which answers genesis hash 5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d, but solana-devnet \(Solana Devnet\) is a genesis hash starting EtWTRABZaYq6iMfeYKouRu166VU2xqa1$/,
      );
      expect(moved.text).not.toContain('secret-key-in-path');
      expect(moved.text).not.toContain('pass-in-url');
    } finally {
      rpc.chainId = 84532;
      rpc.genesisHash = 'EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG';
      await t.stop();
    }
  });

  describe('with the database cut', () => {
    let database: TestDatabase;
    let forwarder: DatabaseForwarder;
    let service: Service;
    let client: ContractClient;

    beforeAll(async () => {
      database = await createTestDatabase();
      const url = new URL(database.url);
      forwarder = new DatabaseForwarder(url.hostname, Number(url.port || 5432));
      await forwarder.open();
      url.hostname = '127.0.0.1';
      url.port = String(forwarder.port);
      const config = loadConfig({
        PORT: '0',
        HOST: '127.0.0.1',
        LOG_LEVEL: 'silent',
        SHUTDOWN_GRACE_MS: '2000',
        RUN_WORKER: 'false',
        ...localChains(rpc.url),
        DATABASE_URL: url.toString(),
      });
      service = await startService(config, { logger: pino({ level: 'silent' }) });
      client = contractClient(service.url);
    });
    afterAll(async () => {
      await ifStarted(service)?.stop();
      await forwarder.cut();
      await ifStarted(database)?.drop();
    });

    it('answers a key it cannot look up with a 500, not a 401: the key is not at fault', async () => {
      const { key } = await createTestAccount(database.handle.db, { credits: 10n });
      await forwarder.cut();
      try {
        const unreachable = await client.get('/v1/credits/balance', { headers: { 'x-api-key': key } });
        expect(unreachable.status).toBe(500);
        expect(unreachable.body).toMatchObject({ code: 'internal_error' });
      } finally {
        await forwarder.open();
      }
      const back = await askUntil(() => client.get('/v1/credits/balance', { headers: { 'x-api-key': key } }), 200);
      expect(back.status).toBe(200);
      // A wrong key is still a 401 once the database answers.
      const wrong = await client.get('/v1/credits/balance', { headers: { 'x-api-key': `${key.slice(0, -4)}0000` } });
      expect(wrong.status).toBe(401);
    }, 120_000);

    it('answers 503 naming the database while it is unreachable, and ready again once it is back', async () => {
      expect((await client.get('/health/ready')).status).toBe(200);
      await forwarder.cut();
      const cut = await client.get('/health/ready');
      expect(cut.status).toBe(503);
      expect(cut.body.failed).toEqual(['database']);
      expect(cut.body.checks['rpc:base-sepolia']).toBe('ok');
      // Liveness does not depend on the database.
      expect((await client.get('/health/live')).status).toBe(200);

      await forwarder.open();
      const back = await askUntil(() => client.get('/health/ready'), 200);
      expect(back.body).toEqual({
        status: 'ready',
        checks: { database: 'ok', 'rpc:base-sepolia': 'ok', 'rpc:solana-devnet': 'ok' },
        failed: [],
      });
    }, 120_000);
  });
});
