import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { sandboxWanted } from '../../server/sandbox';
import { startSandbox, type SandboxState } from '../../devnet/sandbox';
import { startTestService } from '../support/service';

const dataDir = mkdtempSync(path.join(path.resolve('.tmp'), 'sandbox-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('sandbox', () => {
  it('is chosen only when no wallet key and no RPC URL is configured, outside production', () => {
    expect(sandboxWanted({})).toBe(true);
    expect(sandboxWanted({ DATABASE_URL: 'postgres://x', PORT: '1' })).toBe(true);
    expect(sandboxWanted({ EVM_PRIVATE_KEY: '0x01' })).toBe(false);
    expect(sandboxWanted({ RPC_URL_BASE: 'https://rpc' })).toBe(false);
    expect(sandboxWanted({ NODE_ENV: 'production' })).toBe(false);
  });

  it('brings up the peers, a funded demo organisation, sandbox.json and a banner with working commands; a restart keeps keys and API key', async () => {
    // A target of the user's own on 127.0.0.1, allow-listed by the user's SSRF_ALLOW_HOSTS.
    const own = createServer((_request, response) =>
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"own":true}'),
    );
    await new Promise<void>((resolve) => own.listen(0, '127.0.0.1', resolve));
    const ownHost = `127.0.0.1:${(own.address() as AddressInfo).port}`;
    const printed: string[] = [];
    const log = pino({ level: 'silent' });
    const sandbox = await startSandbox({
      dataDir,
      reset: false,
      log,
      env: { SSRF_ALLOW_HOSTS: ` ${ownHost} ,` },
      print: (text) => printed.push(text),
    });
    const t = await startTestService(sandbox.env);
    let first: SandboxState;
    try {
      first = await sandbox.ready(t.service.url, t.database.handle.db);
      const onDisk = JSON.parse(readFileSync(path.join(dataDir, 'sandbox.json'), 'utf8'));
      expect(onDisk).toEqual(first);
      expect(Object.keys(first).sort()).toEqual([
        'apiKey',
        'baseUrl',
        'channelNetworks',
        'client',
        'facilitatorUrl',
        'facilitatorV2Url',
        'llmUrl',
        'rpc',
        'runId',
        'ssrfAllowHosts',
        'targetDetails',
        'targets',
      ]);
      // Every target's protocol version: x402 v1 and v2 (@x402/express) on every network.
      const versions = Object.fromEntries(
        Object.entries(first.targetDetails).map(([name, target]) => [name, target.x402Version]),
      );
      expect(versions).toEqual({
        base: 1,
        'base-sepolia': 1,
        'skale-base': 1,
        'skale-base-sepolia': 1,
        solana: 1,
        'solana-devnet': 1,
        'v2-base': 2,
        'v2-base-sepolia': 2,
        'v2-skale-base': 2,
        'v2-skale-base-sepolia': 2,
        'v2-solana': 2,
        'v2-solana-devnet': 2,
        // The opt-in networks: Polygon Amoy (USDC) and MegaETH (MegaUSD, Permit2 only, no version 1 target).
        'polygon-amoy': 1,
        'v2-polygon-amoy': 2,
        'v2-permit2-polygon-amoy': 2,
        'v2-upto-polygon-amoy': 2,
        'v2-batch-polygon-amoy': 2,
        'v2-megaeth': 2,
        'v2-upto-megaeth': 2,
      });
      for (const [name, target] of Object.entries(first.targetDetails)) expect(target.url).toBe(first.targets[name]);

      // The user's allow-list is kept beside the sandbox's targets, and the banner tells them apart.
      const targetHosts = [...new Set(Object.values(first.targets).map((url) => new URL(url).host))];
      expect(first.ssrfAllowHosts).toEqual({ sandbox: targetHosts, user: [ownHost] });
      expect(sandbox.env.SSRF_ALLOW_HOSTS!.split(',')).toEqual([...targetHosts, ownHost]);
      expect([...t.config.ssrfAllowHosts].sort()).toEqual([...targetHosts, ownHost].sort());
      const allowLines = printed
        .join('')
        .split('\n')
        .filter((line) => line.includes('127.0.0.1:') && !line.includes('SSRF_ALLOW_HOSTS='));
      for (const [network, url] of Object.entries(first.targets))
        expect(printed.join('')).toContain(`${new URL(url).host} (${network})`);
      const versionLine = (version: number) =>
        printed
          .join('')
          .split('\n')
          .findIndex((line) => line.trimStart().startsWith(`x402 v${version} targets`));
      expect(versionLine(1)).toBeGreaterThan(-1);
      expect(versionLine(2)).toBeGreaterThan(versionLine(1));
      const v2Lines = printed
        .join('')
        .split('\n')
        .slice(versionLine(2), versionLine(2) + 2)
        .join('\n');
      expect(v2Lines).toContain(`${new URL(first.targets['v2-base-sepolia']!).host} (v2-base-sepolia)`);
      expect(v2Lines).not.toContain('(base-sepolia)');
      expect(allowLines.find((line) => line.includes('yours'))).toMatch(new RegExp(`^ +yours +${ownHost}$`));
      const ownCall = await t.client.post('/relay', { api_url: `http://${ownHost}/anything`, method: 'GET' });
      expect(ownCall.status, ownCall.text).toBe(200);
      expect(ownCall.text).toBe('{"own":true}');
      expect(Object.keys(first.rpc).sort()).toEqual([
        'base',
        'base-sepolia',
        'megaeth',
        'polygon-amoy',
        'skale-base',
        'skale-base-sepolia',
        'solana',
        'solana-devnet',
      ]);
      for (const url of [...Object.values(first.rpc), ...Object.values(first.targets), first.facilitatorUrl]) {
        expect(new URL(url).hostname).toBe('127.0.0.1');
      }
      expect(first.client.evmPrivateKey).toMatch(/^0x[0-9a-f]{64}$/);
      expect(first.client.solanaSecretKey).toHaveLength(64);

      const banner = printed.join('');
      expect(banner).toContain('SANDBOX');
      expect(banner).toContain(first.apiKey);
      expect(banner).toContain(`SSRF_ALLOW_HOSTS=${sandbox.env.SSRF_ALLOW_HOSTS}`);
      expect(banner).toContain(`curl -s -X POST ${t.service.url}/proxy -H 'x-api-key: ${first.apiKey}'`);
      expect(banner).toContain('npm run sandbox:pay -- relay');
      // How an agent starts the MCP server, and discovery on.
      expect(banner).toContain(`ROUTER_URL=${t.service.url} ROUTER_API_KEY=${first.apiKey}`);
      expect(banner).toContain('npx payment-router-mcp');
      expect(banner).toContain(`${t.service.url}/mcp`);
      expect(t.config.discovery).toBe('public');

      // The demo key works and holds the demo credits; the configuration points at the local peers.
      const balance = await t.client.get('/v1/credits/balance', { headers: { 'x-api-key': first.apiKey } });
      expect(balance.status).toBe(200);
      expect(balance.body.effective_available).toBe(100000);
      const config = await t.client.get('/config');
      for (const network of Object.values<any>(config.body.networks.configs))
        expect(network.rpcHost).toMatch(/^127\.0\.0\.1:\d+$/);
      expect([...t.config.ssrfAllowHosts].length).toBeGreaterThan(0);
      // The sandbox's local model backs a paid chat.
      expect(banner).toContain('npm run sandbox:pay -- chat');
      expect((await t.client.get('/llm/health')).status).toBe(200);
      const chat = await t.client.post('/llm/chat', { messages: [{ role: 'user', content: 'hi' }] });
      expect(chat.status).toBe(402);
      expect(chat.body.accepts.map((offer: { network: string }) => offer.network)).toEqual(['base', 'solana']);
    } finally {
      own.close();
      await sandbox.stop();
    }

    // A restart reuses the wallet keys and the API key already in the database.
    const again = await startSandbox({ dataDir, reset: false, log, env: {}, print: () => {} });
    try {
      expect(again.env.EVM_PRIVATE_KEY).toBe(sandbox.env.EVM_PRIVATE_KEY);
      expect(again.env.SOLANA_PRIVATE_KEY).toBe(sandbox.env.SOLANA_PRIVATE_KEY);
      const second = await again.ready(t.service.url, t.database.handle.db);
      expect(second.apiKey).toBe(first!.apiKey);
      // The chains are fresh: the channels a client opens belong to this start.
      expect(second.runId).not.toBe(first!.runId);
      // Without an allow-list of the user's, only the sandbox's targets are listed.
      expect(second.ssrfAllowHosts.user).toEqual([]);
      expect(again.env.SSRF_ALLOW_HOSTS).toBe(second.ssrfAllowHosts.sandbox.join(','));
      expect(second.client.evmPrivateKey).toBe(first!.client.evmPrivateKey);
    } finally {
      await again.stop();
      await t.stop();
    }

    // --reset starts clean: new keys.
    const reset = await startSandbox({ dataDir, reset: true, log, env: {}, print: () => {} });
    try {
      expect(reset.env.EVM_PRIVATE_KEY).not.toBe(sandbox.env.EVM_PRIVATE_KEY);
    } finally {
      await reset.stop();
    }
  });
});
