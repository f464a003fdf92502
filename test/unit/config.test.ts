import { describe, expect, it } from 'vitest';
import { MALFORMED_WITH_SECRETS, partsOfSecretIn, SECRET, URL_VARIABLES } from '../support/url-variables';
import { checkProductionConfig, ConfigError, finalityRuleOf, loadConfig, rpcHost } from '../../payments/basics/config';

describe('configuration', () => {
  it('has the documented defaults', () => {
    const config = loadConfig({});
    expect(config.port).toBe(3000);
    expect(config.host).toBe('127.0.0.1');
    expect(config.networks.map((network) => network.name)).toEqual([
      'base',
      'base-sepolia',
      'skale-base',
      'skale-base-sepolia',
      'solana',
      'solana-devnet',
    ]);
    expect(config.relayFeePercent).toBe(3);
    expect(config.relayFeeMinUsdc).toBe('0');
    expect([config.relayDailyPerWalletUsd, config.relayDailyTotalUsd]).toEqual([100, 1000]);
    expect([config.relayUptoExposurePerWalletUsdc, config.relayUptoExposureTotalUsdc]).toEqual(['5', '100']);
    expect([config.proxyDailyPerAccountUsd, config.proxyDailyTotalUsd]).toEqual([500, 5000]);
    expect([config.capRelay, config.capProxy, config.capWebhooks]).toEqual([50, 100, 200]);
    expect([config.targetTimeoutMs, config.asyncThresholdMs]).toEqual([120_000, 30_000]);
    expect(config.rpcTimeoutMs).toBe(10_000);
    expect(config.idempotencyLeaseMs).toBe(30_000);
    expect(config.databasePoolMax).toBe(20);
    expect(config.llm).toMatchObject({ baseUrl: undefined, priceUsdc: '0.01', maxTokens: 1024 });
  });

  it.each([
    ['PORT', 'eighty'],
    ['CAP_RELAY', '0'],
    ['NETWORKS', 'base,ethereum-classic'],
    ['NETWORKS', 'base,eip155:61'],
    ['NETWORKS', 'base,base'],
    ['NETWORKS', 'base,eip155:8453'],
    ['RPC_URL_BASE', 'not a url'],
    ['RPC_URL_BASE', 'ftp://example.org'],
    ['RELAY_FEE_PERCENT', '3.333'],
    ['RELAY_FEE_MIN_USDC', '-1'],
    ['RELAY_UPTO_EXPOSURE_PER_WALLET_USDC', '0.0000001'],
    ['RELAY_UPTO_EXPOSURE_TOTAL_USDC', '1e3'],
    ['EVM_PRIVATE_KEY', '0x1234'],
    ['SSRF_ALLOW_HOSTS', '127.0.0.1'],
    ['USDC_ADDRESS_BASE', '0x12'],
    ['LOG_LEVEL', 'loud'],
    ['RUN_WORKER', 'maybe'],
    ['RPC_TIMEOUT_MS', '50'],
    ['RPC_TIMEOUT_MS', '10s'],
    ['IDEMPOTENCY_LEASE_MS', '999'],
    ['DATABASE_POOL_MAX', '1'],
    ['DATABASE_POOL_MAX', 'many'],
    ['SECP256K1_IMPLEMENTATION', 'openssl'],
  ])('stops on a wrong %s with a message naming it', (variable, value) => {
    try {
      loadConfig({ [variable]: value });
      expect.unreachable(`${variable}=${value} was accepted`);
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe(variable);
      expect((error as Error).message).toContain(variable);
    }
  });

  it('reads per-network overrides and lists', () => {
    const config = loadConfig({
      NETWORKS: 'base-sepolia, solana-devnet',
      RPC_URL_BASE_SEPOLIA: 'http://127.0.0.1:8545/',
      USDC_ADDRESS_BASE_SEPOLIA: '0x0000000000000000000000000000000000000001',
      SSRF_ALLOW_HOSTS: '127.0.0.1:4010, localhost:4011',
    });
    expect(config.networks).toEqual([
      {
        name: 'base-sepolia',
        rpcUrl: 'http://127.0.0.1:8545',
        rpcVariable: 'RPC_URL_BASE_SEPOLIA',
        usdc: '0x0000000000000000000000000000000000000001',
      },
      {
        name: 'solana-devnet',
        rpcUrl: 'https://api.devnet.solana.com',
        usdc: '4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU',
      },
    ]);
    expect([...config.ssrfAllowHosts]).toEqual(['127.0.0.1:4010', 'localhost:4011']);
  });

  it("takes a network's finality rule from its row, or a depth in blocks from FINALITY_DEPTH_<NAME> on an EVM network", () => {
    const rows = loadConfig({ NETWORKS: 'base-sepolia,solana-devnet,skale-base' });
    expect(finalityRuleOf(rows.networks, 'base-sepolia')).toEqual({ head: 'finalized', watchSeconds: 3600 });
    expect(finalityRuleOf(rows.networks, 'solana-devnet')).toEqual({ commitment: 'finalized', watchSeconds: 600 });
    expect(finalityRuleOf(rows.networks, 'skale-base')).toEqual({ blocks: 1, watchSeconds: 600 });
    const local = loadConfig({ NETWORKS: 'base-sepolia', FINALITY_DEPTH_BASE_SEPOLIA: '2' });
    expect(finalityRuleOf(local.networks, 'base-sepolia')).toEqual({ blocks: 2, watchSeconds: 3600 });
    for (const [variable, value] of [
      ['FINALITY_DEPTH_BASE_SEPOLIA', '0'],
      ['FINALITY_DEPTH_BASE_SEPOLIA', '1.5'],
      ['FINALITY_DEPTH_SOLANA_DEVNET', '2'],
    ] as const) {
      const attempt = () => loadConfig({ NETWORKS: 'base-sepolia,solana-devnet', [variable]: value });
      expect(attempt).toThrow(ConfigError);
      expect(attempt).toThrow(variable);
    }
  });

  it("accepts a network's usual name in NETWORKS and in its variables, beside our name and its CAIP-2 id", () => {
    const config = loadConfig({
      NETWORKS: 'arbitrum-sepolia, polygon, celo-sepolia, xdc-apothem',
      RPC_URL_ARBITRUM_SEPOLIA: 'http://127.0.0.1:8545/',
      USDC_ADDRESS_ARBITRUM_SEPOLIA: '0x0000000000000000000000000000000000000002',
      FINALITY_DEPTH_ARBITRUM_SEPOLIA: '3',
      RPC_URL_POLYGON: 'http://127.0.0.1:8546',
      RPC_URL_EIP155_11142220: 'http://127.0.0.1:8547',
    });
    expect(config.networks.map(({ name, rpcUrl, rpcVariable }) => ({ name, rpcUrl, rpcVariable }))).toEqual([
      { name: 'eip155:421614', rpcUrl: 'http://127.0.0.1:8545', rpcVariable: 'RPC_URL_ARBITRUM_SEPOLIA' },
      { name: 'polygon', rpcUrl: 'http://127.0.0.1:8546', rpcVariable: 'RPC_URL_POLYGON' },
      { name: 'eip155:11142220', rpcUrl: 'http://127.0.0.1:8547', rpcVariable: 'RPC_URL_EIP155_11142220' },
      { name: 'eip155:51', rpcUrl: 'https://erpc.apothem.network', rpcVariable: undefined },
    ]);
    expect(config.networks[0]).toMatchObject({
      usdc: '0x0000000000000000000000000000000000000002',
      finality: { blocks: 3 },
    });
    // Both names of one network listed, or its two variables set to different URLs: refused.
    expect(() => loadConfig({ NETWORKS: 'arbitrum-sepolia,eip155:421614' })).toThrow('listed twice');
    const twice = () =>
      loadConfig({
        NETWORKS: 'arbitrum',
        RPC_URL_EIP155_42161: 'http://127.0.0.1:8545',
        RPC_URL_ARBITRUM: 'http://127.0.0.1:8546',
      });
    expect(twice).toThrow(ConfigError);
    expect(twice).toThrow(/^RPC_URL_ARBITRUM: names eip155:42161 as RPC_URL_EIP155_42161 does, with another value$/);
  });

  it('lists every network by its names beside its CAIP-2 id when NETWORKS names an unknown one', () => {
    let message = '';
    try {
      loadConfig({ NETWORKS: 'base,arbitrum-goerli' });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      message = (error as Error).message;
    }
    expect(message).toMatch(/^NETWORKS: unknown network "arbitrum-goerli"; known /);
    for (const listed of [
      'base (eip155:8453)',
      'polygon or polygon-pos (eip155:137)',
      'arbitrum or arbitrum-one (eip155:42161)',
      'arbitrum-sepolia (eip155:421614)',
      'solana or solana-mainnet or solana-mainnet-beta (solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp)',
      'celo-sepolia (eip155:11142220)',
    ]) {
      expect(message).toContain(listed);
    }
  });

  it('never shows credentials of an RPC URL', () => {
    expect(rpcHost('https://user:secret@rpc.example.org:8443/v2/API_KEY?token=x')).toBe('rpc.example.org:8443');
  });
});

describe('a malformed URL with a secret in it', () => {
  it.each(URL_VARIABLES.flatMap((variable) => MALFORMED_WITH_SECRETS.map((value) => [variable, value])))(
    'stops on %s=%s naming the variable and never the secret',
    (variable, value) => {
      const attempt = () => loadConfig({ [variable]: value });
      expect(attempt).toThrow(ConfigError);
      try {
        attempt();
      } catch (error) {
        expect((error as ConfigError).variable).toBe(variable);
        expect((error as Error).message).toMatch(new RegExp(`^${variable}: `));
        expect((error as Error).message).not.toContain(SECRET);
        expect(partsOfSecretIn((error as Error).message)).toEqual([]);
        expect((error as Error).message).not.toContain(`u:`);
        expect((error as Error).message).not.toContain(`alice`);
      }
    },
  );

  it('says what is wrong, with at most the scheme and host', () => {
    const badPort =
      'has a port that is not a number from 0 to 65535 (or a user name and password with no "@host" after them)';
    expect(() => loadConfig({ RPC_URL_BASE: `http://u:${SECRET}@h:99999/` })).toThrow(
      `RPC_URL_BASE: ${badPort} (http://)`,
    );
    // A URL that does not parse shows its scheme alone: its "port" may be a password.
    expect(() => loadConfig({ RPC_URL_BASE: 'http://rpc.example.org:99999/' })).toThrow(
      `RPC_URL_BASE: ${badPort} (http://)`,
    );
    expect(() => loadConfig({ RPC_URL_BASE: `https://alice:${SECRET}` })).toThrow(
      `RPC_URL_BASE: ${badPort} (https://)`,
    );
    expect(() => loadConfig({ RPC_URL_BASE: `ftp://u:${SECRET}@rpc.example.org/` })).toThrow(
      'RPC_URL_BASE: expected an http or https URL (ftp://rpc.example.org)',
    );
    expect(() => loadConfig({ FACILITATOR_URL: `http://u:${SECRET}@/x` })).toThrow(
      'FACILITATOR_URL: has no host (http://)',
    );
    expect(() => loadConfig({ LLM_BASE_URL: `https://u:${SECRET}@llm.example.org/v1` })).toThrow(
      'LLM_BASE_URL: must not carry a user name or password (https://llm.example.org)',
    );
    expect(() => loadConfig({ PUBLIC_BASE_URL: `https://u:${SECRET}@api.example.org` })).toThrow(
      'PUBLIC_BASE_URL: must not carry a user name or password (https://api.example.org)',
    );
  });

  it('refuses a query string or a fragment in a URL the service appends paths to, naming the variable', () => {
    for (const variable of ['FACILITATOR_URL', 'LLM_BASE_URL', 'PUBLIC_BASE_URL'])
      for (const value of [
        `https://api.example.org/key?k=${SECRET}`,
        'https://api.example.org/v1?',
        'https://api.example.org/v1#x',
      ]) {
        const attempt = () => loadConfig({ [variable]: value });
        expect(attempt, `${variable}=${value}`).toThrow(
          `${variable}: must not carry a query string or a fragment: the service appends paths to it (such as /settle), which would land after them (https://api.example.org)`,
        );
      }
    // A JSON-RPC endpoint is called as it is: its query (an API key) is kept.
    expect(
      loadConfig({ NETWORKS: 'base', RPC_URL_BASE: `https://rpc.example.org/v2?key=${SECRET}` }).networks[0]?.rpcUrl,
    ).toBe(`https://rpc.example.org/v2?key=${SECRET}`);
    expect(loadConfig({ FACILITATOR_URL: 'https://facilitator.example.org/x402/' }).facilitatorUrl).toBe(
      'https://facilitator.example.org/x402',
    );
  });

  it('keeps the credentials of an RPC or facilitator URL, which are sent as basic authentication', () => {
    const config = loadConfig({
      NETWORKS: 'base',
      RPC_URL_BASE: `https://u:${SECRET}@rpc.example.org/v2/${SECRET}`,
      FACILITATOR_URL: `https://u:${SECRET}@facilitator.example.org/`,
      DATABASE_URL: `postgres://u:${SECRET}@db.example.org/prs`,
    });
    expect(config.networks[0]?.rpcUrl).toBe(`https://u:${SECRET}@rpc.example.org/v2/${SECRET}`);
    expect(config.facilitatorUrl).toBe(`https://u:${SECRET}@facilitator.example.org`);
    expect(config.databaseUrl).toBe(`postgres://u:${SECRET}@db.example.org/prs`);
  });
});

describe('NODE_ENV=production', () => {
  const keys = {
    NODE_ENV: 'production',
    EVM_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
    SOLANA_PRIVATE_KEY: `[${Array.from({ length: 64 }, () => '1').join(',')}]`,
  };
  const check = (env: Record<string, string>) => () => {
    checkProductionConfig(loadConfig(env), env);
  };

  it('refuses to start without DATABASE_URL, naming the variable and the way out', () => {
    expect(check(keys)).toThrow(ConfigError);
    expect(check(keys)).toThrow(/DATABASE_URL: is required in production .*EMBEDDED_POSTGRES=allow/);
  });

  it('starts the embedded Postgres in production only when EMBEDDED_POSTGRES=allow says so', () => {
    expect(check({ ...keys, EMBEDDED_POSTGRES: 'allow' })).not.toThrow();
    expect(check({ ...keys, EMBEDDED_POSTGRES: 'yes' })).toThrow(/DATABASE_URL/);
    expect(check({ ...keys, DATABASE_URL: 'postgres://db.internal/prs' })).not.toThrow();
  });

  it('still needs the wallet key of each enabled chain type', () => {
    const env = { ...keys, DATABASE_URL: 'postgres://db.internal/prs' };
    expect(check({ ...env, EVM_PRIVATE_KEY: '' })).toThrow(/EVM_PRIVATE_KEY/);
    expect(check({ ...env, SOLANA_PRIVATE_KEY: '' })).toThrow(/SOLANA_PRIVATE_KEY/);
    expect(check({ ...env, SOLANA_PRIVATE_KEY: '', NETWORKS: 'base' })).not.toThrow();
  });

  it('asks nothing more outside production', () => {
    expect(check({ NODE_ENV: 'development' })).not.toThrow();
  });
});
