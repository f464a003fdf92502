/**
 * The load generator's paid calls: direct with the unmodified x402-fetch client, or through
 * POST /proxy, with each call's wall-clock start and end.
 */
import { createWalletClient, defineChain, http as viemHttp, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { RunResult } from './autocannon';
import { Samples, type LatencySummary } from './stats';

export interface PaidRun {
  mode: 'direct' | 'proxy';
  /** direct: the paid route of the target; proxy: the service's base URL. */
  url: string;
  targetUrl: string;
  apiKey?: string;
  rpcUrl: string;
  chainId: number;
  clientEvmPrivateKey: Hex;
  count: number;
  concurrency: number;
}

let payingFetch: { key: string; fetch: typeof fetch } | undefined;

async function paidFetch(run: PaidRun): Promise<typeof fetch> {
  const key = `${run.rpcUrl} ${run.clientEvmPrivateKey}`;
  if (payingFetch?.key === key) return payingFetch.fetch;
  const { wrapFetchWithPayment } = await import('x402-fetch');
  const chain = defineChain({
    id: run.chainId,
    name: 'base-sepolia',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [run.rpcUrl] } },
  });
  const wallet = createWalletClient({
    account: privateKeyToAccount(run.clientEvmPrivateKey),
    chain,
    transport: viemHttp(run.rpcUrl),
  });
  payingFetch = { key, fetch: wrapFetchWithPayment(fetch, wallet as never, 1_000_000n) as typeof fetch };
  return payingFetch.fetch;
}

export interface PaidResult extends RunResult {
  failures: string[];
  /** Wall-clock start and end of each call, in milliseconds (for timelines against the target's records). */
  calls: Array<[number, number]>;
}

const wallClock = () => performance.timeOrigin + performance.now();

export async function paidRun(run: PaidRun): Promise<PaidResult> {
  // One call: direct with the paying client, or POST /proxy with the API key.
  let send: () => Promise<Response>;
  if (run.mode === 'direct') {
    const pay = await paidFetch(run);
    send = () => pay(run.targetUrl);
  } else {
    const apiKey = run.apiKey;
    if (apiKey === undefined) throw new Error('a paid run through /proxy needs an API key');
    send = () =>
      fetch(new URL('/proxy', run.url), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
        body: JSON.stringify({ api_url: run.targetUrl, method: 'GET' }),
      });
  }
  const all = new Samples();
  const byStatus = new Map<number, Samples>();
  const failures: string[] = [];
  const calls: Array<[number, number]> = [];
  let errors = 0;
  let issued = 0;
  const startedAt = performance.now();
  const one = async () => {
    const sentAt = performance.now();
    const startedWall = wallClock();
    let status: number;
    try {
      const response = await send();
      const text = await response.text();
      status = response.status;
      if (status !== 200 && failures.length < 5) failures.push(`${status} ${text.slice(0, 200)}`);
    } catch (error) {
      errors += 1;
      if (failures.length < 5) failures.push(String(error));
      return;
    }
    const elapsed = performance.now() - sentAt;
    if (calls.length < 10_000) calls.push([startedWall, wallClock()]);
    all.add(elapsed);
    let samples = byStatus.get(status);
    if (!samples) byStatus.set(status, (samples = new Samples()));
    samples.add(elapsed);
  };
  const worker = async () => {
    while (issued < run.count) {
      issued += 1;
      await one();
    }
  };
  await Promise.all(Array.from({ length: run.concurrency }, worker));
  const durationS = (performance.now() - startedAt) / 1000;
  const summaries: Record<string, LatencySummary> = {};
  for (const [status, samples] of byStatus) summaries[status] = samples.summary();
  return {
    responses: all.count,
    durationS,
    rps: all.count / durationS,
    latency: all.summary(),
    byStatus: summaries,
    errors,
    timeouts: 0,
    failures,
    calls,
  };
}
