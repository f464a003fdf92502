// The alerting rules of ops/prometheus/alerts.yml, in Debian's own Prometheus: promtool checks
// them, then a real Prometheus server on 127.0.0.1 scrapes a running instance of the service (the
// local peers' chains behind it) every second and evaluates the rules every second. Once the
// service wallet is drained on a local chain (a real transfer of its whole stablecoin away), the
// float job's next reading puts the network under its floor, and FloatBelowFloor fires for that
// network in Prometheus's /api/v1/alerts. Where /usr/bin/prometheus or promtool is missing they are
// installed first (test/setup/install-prometheus.sh: apt-get, as root or through password-less
// sudo); the test skips, saying why, only where that cannot be done.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { drainLocalEvmWallet } from '../../devnet/drain';
import { sample } from '../support/metrics';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const ROOT = path.resolve(import.meta.dirname, '../..');
const RULES = path.join(ROOT, 'ops/prometheus/alerts.yml');
const PROMETHEUS = '/usr/bin/prometheus';
const PROMTOOL = '/usr/bin/promtool';
const NETWORK = 'base';
/** Generous bounds on polls: the machine is loaded. */
const WAIT_MS = 120_000;

/** Prometheus and promtool where installed, or installed now by test/setup/install-prometheus.sh; else why not. */
function prometheusOrWhyNot(): string | undefined {
  if (existsSync(PROMETHEUS) && existsSync(PROMTOOL)) return undefined;
  const installed = spawnSync('bash', [path.join(ROOT, 'test/setup/install-prometheus.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 10 * 60_000,
  });
  if (installed.status === 0 && existsSync(PROMETHEUS) && existsSync(PROMTOOL)) return undefined;
  const said = installed.stderr.trim().split('\n').at(-1) ?? '';
  return `prometheus is missing and could not be installed (${said || `exit ${String(installed.status)}`})`;
}

const whyNot = prometheusOrWhyNot();
if (whyNot) console.warn(`skipping the Prometheus alerting test: ${whyNot}`);

async function unusedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const seen = await probe().catch(() => undefined);
    if (seen !== undefined) return seen;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

interface PrometheusAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing' | 'inactive';
  activeAt: string;
  value: string;
}

describe.skipIf(whyNot !== undefined)('the alerting rules in a real Prometheus', () => {
  let peers: Peers;
  let t: TestService;
  let prometheus: ChildProcess | undefined;
  let prometheusUrl: string;
  let dir: string;
  let prometheusLog = '';

  beforeAll(async () => {
    peers = await startPeers({ networks: [NETWORK], v2Targets: false });
    t = await startProxyService(peers, { FLOAT_REFRESH_SECONDS: '1', FLOAT_FLOOR_USDC_BASE: '10' });
    dir = mkdtempSync(path.join(os.tmpdir(), 'prs-prometheus-'));
    const port = await unusedPort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    const config = path.join(dir, 'prometheus.yml');
    writeFileSync(
      config,
      [
        'global:',
        '  scrape_interval: 1s',
        '  evaluation_interval: 1s',
        'rule_files:',
        `  - ${JSON.stringify(RULES)}`,
        'scrape_configs:',
        '  - job_name: payment-router',
        '    static_configs:',
        `      - targets: [${JSON.stringify(new URL(t.service.url).host)}]`,
        '',
      ].join('\n'),
    );
    prometheus = spawn(
      PROMETHEUS,
      [
        `--config.file=${config}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    prometheus.stderr!.on('data', (chunk: Buffer) => (prometheusLog += chunk.toString()));
    await until('Prometheus to be ready', async () =>
      (await fetch(`${prometheusUrl}/-/ready`)).ok ? true : undefined,
    );
  });

  afterAll(async () => {
    if (prometheus && prometheus.exitCode === null) {
      const exited = new Promise((resolve) => prometheus!.once('exit', resolve));
      prometheus.kill('SIGTERM');
      await exited;
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
    await ifStarted(t)?.stop();
    await ifStarted(peers)?.stop();
  });

  async function api<T>(pathAndQuery: string): Promise<T> {
    const res = await fetch(`${prometheusUrl}${pathAndQuery}`);
    const body = (await res.json()) as { status: string; data: T };
    expect(body.status).toBe('success');
    return body.data;
  }

  async function query(expression: string): Promise<number | undefined> {
    const data = await api<{ result: { value: [number, string] }[] }>(
      `/api/v1/query?query=${encodeURIComponent(expression)}`,
    );
    const value = data.result[0]?.value[1];
    return value === undefined ? undefined : Number(value);
  }

  const floatAlerts = async () =>
    (await api<{ alerts: PrometheusAlert[] }>('/api/v1/alerts')).alerts.filter(
      (alert) => alert.labels.alertname === 'FloatBelowFloor' && alert.labels.network === NETWORK,
    );

  it('promtool finds the rules valid', () => {
    const checked = spawnSync(PROMTOOL, ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(checked.stderr).toBe('');
    expect(checked.status).toBe(0);
    expect(checked.stdout).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('fires FloatBelowFloor for the network once the service wallet is drained there', async () => {
    // Scraped, and evaluated: the float as read by the service, above its floor; nothing fires.
    const float = await until('the float in Prometheus', async () => {
      const value = await query(`prs_wallet_float_micro_usdc{network="${NETWORK}"}`);
      return value !== undefined && value > 0 ? value : undefined;
    });
    expect(float).toBeGreaterThan(10_000_000);
    await until('the rules to be evaluated', async () => {
      const { groups } = await api<{ groups: { rules: { name: string; health: string; lastEvaluation: string }[] }[] }>(
        '/api/v1/rules?type=alert',
      );
      const rule = groups.flatMap((group) => group.rules).find((entry) => entry.name === 'FloatBelowFloor');
      return rule?.health === 'ok' && !rule.lastEvaluation.startsWith('0001') ? rule : undefined;
    });
    expect(await query(`prs_wallet_below_floor{network="${NETWORK}",kind="float"}`)).toBe(0);
    expect(await floatAlerts()).toEqual([]);

    const drained = await drainLocalEvmWallet(NETWORK, peers.rpcUrls[NETWORK]!, peers.wallets.service.evm.privateKey);
    expect(Number(drained.asset)).toBe(float);
    expect(await peers.usdcBalance(NETWORK, peers.wallets.service.evm.address)).toBe(0n);

    const firing = await until('FloatBelowFloor to fire', async () => {
      const alerts = await floatAlerts();
      return alerts.find((alert) => alert.state === 'firing');
    });
    expect(firing).toMatchObject({
      labels: { alertname: 'FloatBelowFloor', network: NETWORK, severity: 'critical' },
      state: 'firing',
      value: '1e+00',
    });
    expect(firing.annotations.summary).toContain(NETWORK);
    // The evidence: Prometheus's own answer.
    console.log(`FloatBelowFloor in Prometheus's /api/v1/alerts: ${JSON.stringify(firing)}`);
    // The service says the same, in its own /metrics (checked against the document).
    const metrics = await t.client.get('/metrics');
    expect(metrics.status).toBe(200);
    expect(sample(metrics.text, `prs_wallet_below_floor{network="${NETWORK}",kind="float"}`)).toBe(1);
    expect(prometheusLog).not.toMatch(/level=error/);
  });
});
