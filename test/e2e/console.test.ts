// The console (GET /console) in Debian's Chromium driven by playwright-core: a key pasted into the
// page, a real paid /proxy call made in another tab against the local peers, and the call seen in
// the page's history with its amount, and in the chart. Every answer of the service to either tab
// is checked against the document. Where /usr/bin/chromium is missing it is installed first
// (test/setup/install-chromium.sh: apt-get, as root or through password-less sudo); the test skips,
// saying why, only where that cannot be done.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Response } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPeers, type Peers } from '../../devnet/index';
import { createTestAccount, type TestAccount } from '../support/accounts';
import { checkResponse, type ContractResponse } from '../support/contract';
import { startProxyService } from '../support/proxy';
import type { TestService } from '../support/service';
import { ifStarted } from '../support/teardown';

const CHROMIUM = '/usr/bin/chromium';
const ROOT = path.resolve(import.meta.dirname, '../..');

/** Chromium where it is installed, or installed now by test/setup/install-chromium.sh; else why not. */
function chromiumOrWhyNot(): string | undefined {
  if (existsSync(CHROMIUM)) return undefined;
  const installed = spawnSync('bash', [path.join(ROOT, 'test/setup/install-chromium.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 10 * 60_000,
  });
  if (installed.status === 0 && existsSync(CHROMIUM)) return undefined;
  const said = installed.stderr.trim().split('\n').at(-1) ?? '';
  return `${CHROMIUM} is missing and could not be installed (${said || `exit ${String(installed.status)}`})`;
}
const whyNot = chromiumOrWhyNot();
const available = whyNot === undefined;
if (whyNot !== undefined) console.warn(`console.test.ts skipped: ${whyNot}`);

const PRICE = 12_345n;
/** ceil(12,345 x 1.03 / 1000) */
const CREDITS = 13;
const SCREENSHOT = path.join(ROOT, '.tmp', 'console.png');

let peers: Peers;
let t: TestService;
let account: TestAccount;
let context: BrowserContext;
let userDataDir: string;
/** Every answer of the service to the browser, checked against the document once the test ends. */
const answers: Array<Promise<void>> = [];

function checkAnswer(response: Response): void {
  const url = new URL(response.url());
  if (url.origin !== new URL(t.service.url).origin) return;
  const method = response.request().method();
  answers.push(
    (async () => {
      const text = await response.text();
      const headers = new Headers(await response.allHeaders());
      const json = (headers.get('content-type') ?? '').startsWith('application/json') && text.length > 0;
      const checked: ContractResponse = {
        status: response.status(),
        headers,
        body: json ? JSON.parse(text) : text,
        text,
        operationId: undefined,
      };
      await checkResponse(method, `${url.pathname}${url.search}`, checked);
    })(),
  );
}

describe.skipIf(!available)('the console in Chromium', () => {
  beforeAll(async () => {
    peers = await startPeers({
      networks: ['base-sepolia'],
      pricesMicroUsdc: { paid: PRICE },
      targets: [{ name: 'base-sepolia', network: 'base-sepolia' }],
    });
    t = await startProxyService(peers);
    account = await createTestAccount(t.database.handle.db, { credits: 1_000n, dailyCapCredits: 500n });
    userDataDir = mkdtempSync(path.join(os.tmpdir(), 'prs-console-chromium-'));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
      viewport: { width: 1280, height: 1000 },
    });
    context.on('response', checkAnswer);
  });

  afterAll(async () => {
    await ifStarted(context)
      ?.close()
      .catch(() => {});
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
    await ifStarted(t)?.stop();
    await ifStarted(peers)?.stop();
  });

  it('shows a paid call made in another tab with its amount, the balance, the daily cap and the chart', async () => {
    const consoleTab = await context.newPage();
    const errors: string[] = [];
    consoleTab.on('pageerror', (error) => errors.push(error.message));
    consoleTab.on('console', (message) => {
      if (message.type() === 'error') errors.push(message.text());
    });
    const opened = await consoleTab.goto(`${t.service.url}/console`);
    expect(opened?.status()).toBe(200);
    expect(opened?.headers()['content-security-policy']).toMatch(/default-src 'none'; script-src 'sha256-/);

    await consoleTab.fill('#api-key', account.key);
    await consoleTab.click('#key-form button[type=submit]');
    await consoleTab.waitForSelector('#dashboard:not([hidden])');
    // The grant is the history's one item so far.
    await expect.poll(() => consoleTab.locator('#payments tr').allTextContents()).toHaveLength(1);
    expect(await consoleTab.textContent('#payments')).toContain('credited');
    expect(await consoleTab.textContent('#balance')).toBe('1,000 credits');
    expect(await consoleTab.textContent('#daily-cap')).toBe('500 credits');
    expect(await consoleTab.textContent('#key-prefix')).toBe(account.prefix);
    // The key is in this tab's session storage, nowhere else.
    expect(await consoleTab.evaluate(() => sessionStorage.getItem('prs.console.apiKey'))).toBe(account.key);
    expect(await consoleTab.evaluate(() => localStorage.length)).toBe(0);

    // Another tab of the same browser makes a real paid /proxy call with the key.
    const callTab = await context.newPage();
    await callTab.goto(`${t.service.url}/docs`);
    const target = peers.targets['base-sepolia']!.routes.paid.url;
    const paid = await callTab.evaluate(
      async ({ key, url }) => {
        const response = await fetch('/proxy', {
          method: 'POST',
          headers: { 'x-api-key': key, 'content-type': 'application/json' },
          body: JSON.stringify({ api_url: url, method: 'GET' }),
        });
        return { status: response.status, paymentResponse: response.headers.get('x-payment-response') };
      },
      { key: account.key, url: target },
    );
    expect(paid.status).toBe(200);
    expect(paid.paymentResponse).not.toBeNull();

    // The console refreshes by itself every 5 s; the call appears charged, with its amount.
    await consoleTab.bringToFront();
    const row = consoleTab.locator('#payments tr', { hasText: 'charged' });
    await expect.poll(() => row.count(), { timeout: 20_000 }).toBe(1);
    const cells = await row.locator('td').allTextContents();
    expect(cells).toContain('0.012345 USDC');
    expect(cells).toContain(String(CREDITS));
    expect(cells).toContain(new URL(target).origin + new URL(target).pathname);
    expect(cells).toContain('base-sepolia');
    expect(await consoleTab.textContent('#daily-spent')).toBe(`${CREDITS} credits`);
    expect(await consoleTab.textContent('#balance')).toBe(`${1_000 - CREDITS} credits`);
    expect(await consoleTab.textContent('#by-host')).toContain(new URL(target).host);
    expect(await consoleTab.textContent('#by-key')).toContain(account.prefix);

    // The chart: one bar per day of the range, today's as high as its credits say.
    const today = new Date().toISOString().slice(0, 10);
    expect(await consoleTab.locator('#spend-chart rect').count()).toBe(30);
    const bar = consoleTab.locator(`#spend-chart rect[data-day="${today}"]`);
    expect(await bar.getAttribute('data-credits')).toBe(String(CREDITS));
    expect(Number(await bar.getAttribute('height'))).toBeGreaterThan(100);
    const box = await consoleTab.locator('#spend-chart').boundingBox();
    expect(box?.width).toBeGreaterThan(300);
    expect(box?.height).toBeGreaterThan(50);

    mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    await consoleTab.screenshot({ path: SCREENSHOT, fullPage: true });
    console.log(`console screenshot: ${path.relative(ROOT, SCREENSHOT)}`);
    expect(errors).toEqual([]);
    await Promise.all(answers);
    expect(answers.length).toBeGreaterThan(5);
  }, 120_000);
});
