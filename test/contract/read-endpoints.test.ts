import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../support/service';
import { createTestAccount } from '../support/accounts';
import { ifStarted } from '../support/teardown';
import { loadDocument } from '../../server/openapi';

let t: TestService;
beforeAll(async () => {
  t = await startTestService({
    NETWORKS: 'base,base-sepolia,solana-devnet',
    RPC_URL_BASE: 'https://user:secret@rpc.example.org/v2/KEY',
    RELAY_FEE_MIN_USDC: '0.002',
    RELAY_DAILY_PER_WALLET_USD: '100',
    RELAY_DAILY_TOTAL_USD: '1000',
    PROXY_DAILY_PER_ACCOUNT_USD: '500',
    PROXY_DAILY_TOTAL_USD: '5000',
    CAP_RELAY: '50',
    CAP_PROXY: '100',
    CAP_WEBHOOKS: '200',
  });
});
afterAll(async () => {
  await ifStarted(t)?.stop();
});

function today(): string {
  return new Date().toISOString().slice(0, 10);
}

describe('GET /config', () => {
  it('reports the configuration, networks without credentials', async () => {
    const res = await t.client.get('/config');
    expect(res.status).toBe(200);
    expect(res.body.protocol).toEqual({ versions: ['1', '2'], current: '1' });
    expect(res.body.credits).toMatchObject({ creditsPerUsdc: 1000, usdcPerCredit: 0.001 });
    expect(res.body.relay.fees).toMatchObject({ percentage: 3, minUSDC: 0.002 });
    expect(res.body.relay.limits).toEqual({ maxDailyPerWallet: 100, maxDailyTotal: 1000 });
    expect(res.body.relay.timeouts).toEqual({ asyncThresholdMs: 30000 });
    expect(res.body.networks.enabled).toEqual(['base', 'base-sepolia', 'solana-devnet']);
    expect(res.body.networks.evm).toEqual(['base', 'base-sepolia']);
    expect(res.body.networks.solana).toEqual(['solana-devnet']);
    expect(res.body.networks.v1).toEqual(['base', 'base-sepolia', 'solana-devnet']);
    expect(res.body.networks.v2).toEqual(['eip155:8453', 'eip155:84532', 'solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1']);
    expect(res.body.networks.configs.base).toEqual({
      chainType: 'evm',
      chainId: 8453,
      usdc: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      rpcHost: 'rpc.example.org',
      label: 'Base',
      networkClass: 'mainnet',
      symbol: 'USDC',
      decimals: 6,
      transferMethod: 'eip3009',
      finality: { head: 'finalized', watchSeconds: 3600 },
    });
    expect(res.body.networks.configs['solana-devnet']).toEqual({
      chainType: 'solana',
      usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
      rpcHost: 'api.devnet.solana.com',
      label: 'Solana Devnet',
      networkClass: 'testnet',
      symbol: 'USDC',
      decimals: 6,
      transferMethod: 'spl',
      finality: { commitment: 'finalized', watchSeconds: 600 },
    });
    expect(res.text).not.toContain('secret');
    expect(res.text).not.toContain('KEY');
    expect(res.body.assets).toEqual({ enabled: ['usdc'] });
    expect(res.body.server.baseUrl).toBe(t.service.url);
    expect(res.body.server.timeouts).toEqual({ requestMs: 600000, headersMs: 610000, keepAliveMs: 620000 });
  });
});

describe('GET /limits', () => {
  it('reports system volume from the spend counters, in USDC', async () => {
    const { db } = t.database.handle;
    await db
      .insertInto('daily_spend')
      .values([
        {
          scope: 'relay_system',
          scope_id: 'system',
          network_class: 'mainnet',
          day: today(),
          spent_micro_usdc: 125_500_000n,
        },
        { scope: 'proxy_system', scope_id: 'system', network_class: 'testnet', day: today(), spent_credits: 2_500n },
        {
          scope: 'relay_system',
          scope_id: 'system',
          network_class: 'testnet',
          day: '2020-01-01',
          spent_micro_usdc: 999_000_000n,
        },
      ])
      .execute();
    const res = await t.client.get('/limits');
    expect(res.status).toBe(200);
    expect(res.body.relay.mainnet).toEqual({
      daily_limit: 1000,
      today_spent: 125.5,
      remaining: 874.5,
      percentage_used: '12.6%',
    });
    expect(res.body.relay.testnet).toEqual({
      daily_limit: 1000,
      today_spent: 0,
      remaining: 1000,
      percentage_used: '0.0%',
    });
    expect(res.body.proxy.testnet).toEqual({
      daily_limit: 5000,
      today_spent: 2.5,
      remaining: 4997.5,
      percentage_used: '0.1%',
    });
    expect(res.body.proxy.mainnet.today_spent).toBe(0);
    expect(res.body.relay.per_wallet_daily_limit).toBe(100);
    expect(res.body.proxy.per_account_daily_limit).toBe(500);
    expect(res.body.unit).toBe('USDC');
    const reset = new Date(res.body.reset_time);
    expect(reset.toISOString()).toBe(res.body.reset_time);
    expect(reset.getUTCHours() + reset.getUTCMinutes() + reset.getUTCSeconds()).toBe(0);
    const untilReset = reset.getTime() - Date.now();
    expect(untilReset).toBeGreaterThan(0);
    expect(untilReset).toBeLessThanOrEqual(24 * 3600 * 1000);
  });
});

describe('GET /metrics/rate-limits', () => {
  it('shows each group idle with its limit', async () => {
    const res = await t.client.get('/metrics/rate-limits');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      proxy: { active: 0, limit: 100, utilization: '0.0%' },
      relay: { active: 0, limit: 50, utilization: '0.0%' },
      webhooks: { active: 0, limit: 200, utilization: '0.0%' },
    });
  });
});

describe('GET /health', () => {
  it('is ok while the database and the worker are', async () => {
    const res = await t.client.get('/health');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok', checks: { database: 'ok', worker: 'ok' } });
  });
});

describe('GET /webhooks/{id}', () => {
  async function insert(values: Record<string, unknown>): Promise<string> {
    const row = await t.database.handle.db
      .insertInto('webhooks')
      .values({ kind: 'relay_refund', status: 'async_processing', ...values } as never)
      .returning('id')
      .executeTakeFirstOrThrow();
    return row.id;
  }

  it('answers 202 with Retry-After while pending', async () => {
    const id = await insert({
      kind: 'proxy_payment',
      status: 'async_processing',
      network: 'base-sepolia',
      message: 'watching the payment on-chain',
    });
    const res = await t.client.get(`/webhooks/${id}`);
    expect(res.status).toBe(202);
    expect(res.headers.get('retry-after')).toBe('2');
    expect(res.body).toEqual({ status: 'pending', network: 'base-sepolia', message: 'watching the payment on-chain' });
  });

  it.each(['success', 'refund_confirmed', 'success_refunded', 'no_refund_needed'])(
    'answers 200 for %s',
    async (status) => {
      const id = await insert({
        status,
        tx_hash: '0xabc',
        network: 'base',
        method: 'direct',
        relay_tx_id: 42n,
        message: 'done',
      });
      const res = await t.client.get(`/webhooks/${id}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        status,
        txHash: '0xabc',
        network: 'base',
        method: 'direct',
        relayTxId: 42,
        message: 'done',
      });
    },
  );

  it.each(['payment_failed', 'upstream_error', 'internal_error', 'rate_limited', 'validation_failed', 'refund_failed'])(
    'answers 500 with errorType %s for a failed record',
    async (status) => {
      const id = await insert({ status, relay_tx_id: 7n, error: 'the refund transaction reverted' });
      const res = await t.client.get(`/webhooks/${id}`);
      expect(res.status).toBe(500);
      expect(res.body).toEqual({
        status: 'failed',
        relayTxId: 7,
        error: 'the refund transaction reverted',
        errorType: status,
      });
    },
  );

  it('answers 404 for an unknown id and 400 for a malformed one', async () => {
    const unknown = await t.client.get('/webhooks/6f1c1f4e-0000-4000-8000-000000000000');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe('Not Found');
    const malformed = await t.client.get('/webhooks/not-a-uuid');
    expect(malformed.status).toBe(400);
    expect(malformed.body.details).toMatch(/id/);
  });
});

describe('account balances', () => {
  it('GET /balance shows credits in mainnet and USD in testnet', async () => {
    const { db } = t.database.handle;
    const account = await createTestAccount(db, { credits: 12_345n });
    await db
      .insertInto('daily_spend')
      .values([
        {
          scope: 'proxy_account',
          scope_id: String(account.accountId),
          network_class: 'mainnet',
          day: today(),
          spent_credits: 2_000n,
        },
        {
          scope: 'proxy_account',
          scope_id: String(account.accountId),
          network_class: 'testnet',
          day: today(),
          spent_credits: 1_500n,
        },
      ])
      .execute();
    const res = await t.client.get('/balance', { headers: { 'x-api-key': account.key } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      account_id: account.accountPublicId,
      mainnet: { credits_balance: 12345, daily_limit: 500000, daily_spend: 2000, daily_remaining: 498000 },
      testnet: { daily_limit_usd: 500, today_spent_usd: 1.5, remaining_usd: 498.5 },
    });
  });

  it('GET /v1/credits/balance shows the key prefix, cap and spend, never the key', async () => {
    const { db } = t.database.handle;
    const account = await createTestAccount(db, { credits: 900n, dailyCapCredits: 1_000n });
    await db
      .insertInto('daily_spend')
      .values({
        scope: 'api_key',
        scope_id: String(account.apiKeyId),
        network_class: 'all',
        day: today(),
        spent_credits: 250n,
      })
      .execute();
    const res = await t.client.get('/v1/credits/balance', { headers: { 'x-api-key': account.key } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      key_prefix: account.prefix,
      daily_cap: 1000,
      daily_spent: 250,
      daily_remaining: 750,
      effective_available: 900,
      policy: { default_max_amount: null, hard_max_amount: null, allowed_hosts: null },
    });
    expect(res.text).not.toContain(account.key.slice(account.prefix.length));
  });
});

describe('the document and its page', () => {
  it('GET /openapi.json serves the bundled document', async () => {
    const res = await t.client.get('/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body).toEqual(loadDocument());
  });

  it('GET /docs lists every operation of the document', async () => {
    const res = await t.client.get('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const document = loadDocument() as any;
    const operationIds = Object.values(document.paths).flatMap((item: any) =>
      Object.values(item)
        .map((op: any) => op.operationId)
        .filter(Boolean),
    );
    expect(operationIds.length).toBeGreaterThanOrEqual(18);
    for (const operationId of operationIds) expect(res.text).toContain(`id="op-${operationId}"`);
  });
});
