/**
 * The load generator's paid calls: direct with the unmodified x402-fetch client, through
 * POST /proxy (API key, our wallet pays), through POST /relay (the same x402-fetch client pays us,
 * we pay the target), or the client's own settlement alone: a fresh authorization of the client,
 * signed for the requirement of the relay's 402, settled by POST /settle on the facilitator the
 * service uses (the baseline the relay's added latency is measured against). Each call's
 * wall-clock start and end are returned.
 */
import { createPublicClient, createWalletClient, defineChain, http as viemHttp, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { RunResult } from './autocannon';
import { Samples, type LatencySummary } from './stats';

export interface PaidRun {
  /**
   * channel: direct with the unmodified @x402/fetch and @x402/evm's batch-settlement client (one
   * deposit, then vouchers); relay-channel: that same client paying POST /relay through its channel with us.
   */
  mode: 'direct' | 'proxy' | 'relay' | 'settle' | 'channel' | 'relay-channel';
  /** proxy, relay and settle: the service's base URL (settle reads the relay's 402 from it once, untimed). */
  url: string;
  targetUrl: string;
  apiKey?: string;
  rpcUrl: string;
  chainId: number;
  clientEvmPrivateKey: Hex;
  /** settle: the facilitator the service settles through (its FACILITATOR_URL). */
  facilitatorUrl?: string;
  count: number;
  concurrency: number;
  /** channel, relay-channel: the CAIP-2 network, the token allowed by the spend controls, and what one deposit holds. */
  channel?: { caip2: `${string}:${string}`; asset: Hex; depositAtomic: string };
}

let payingFetch: { key: string; fetch: typeof fetch; wallet: unknown } | undefined;

async function paidFetch(run: PaidRun): Promise<{ fetch: typeof fetch; wallet: unknown }> {
  const key = `${run.rpcUrl} ${run.clientEvmPrivateKey}`;
  if (payingFetch?.key === key) return payingFetch;
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
  payingFetch = { key, fetch: wrapFetchWithPayment(fetch, wallet as never, 1_000_000n) as typeof fetch, wallet };
  return payingFetch;
}

let channelFetch: { key: string; fetch: typeof fetch } | undefined;

/** The unmodified @x402/fetch with @x402/evm's batch-settlement client, its channel in memory; one deposit of channel.depositAtomic. */
async function batchFetch(run: PaidRun): Promise<typeof fetch> {
  const channel = run.channel;
  if (channel === undefined) throw new Error('a channel run needs its network and asset');
  const key = `${run.rpcUrl} ${run.clientEvmPrivateKey}`;
  if (channelFetch?.key === key) return channelFetch.fetch;
  const [{ x402Client }, { toClientEvmSigner }, { BatchSettlementEvmScheme, InMemoryClientChannelStorage }, fetchV2] =
    await Promise.all([
      import('@x402/core/client'),
      import('@x402/evm'),
      import('@x402/evm/batch-settlement/client'),
      import('@x402/fetch'),
    ]);
  const chain = defineChain({
    id: run.chainId,
    name: channel.caip2,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [run.rpcUrl] } },
  });
  const publicClient = createPublicClient({ chain, transport: viemHttp(run.rpcUrl) });
  const client = new x402Client();
  client.register(
    'eip155:*',
    new BatchSettlementEvmScheme(toClientEvmSigner(privateKeyToAccount(run.clientEvmPrivateKey), publicClient), {
      storage: new InMemoryClientChannelStorage(),
      depositStrategy: () => channel.depositAtomic,
    }),
  );
  client.setSpendControls({
    allowedAssets: [{ network: channel.caip2, asset: channel.asset, maxAmountPerPayment: channel.depositAtomic }],
  });
  channelFetch = { key, fetch: fetchV2.wrapFetchWithPayment(fetch, client) };
  return channelFetch.fetch;
}

const relayBody = (run: PaidRun) => JSON.stringify({ api_url: run.targetUrl, method: 'GET' });

/**
 * The client's own settlement, one call: an authorization for the relay's requirement (what the
 * client would pay us), signed as x402-fetch signs it (x402/client's createPaymentHeader, before
 * the clock starts), then POST /settle on the facilitator; the clock runs for the settlement only.
 */
async function settlementCalls(run: PaidRun): Promise<() => Promise<() => Promise<Response>>> {
  const facilitatorUrl = run.facilitatorUrl;
  if (facilitatorUrl === undefined) throw new Error('a settlement run needs the facilitator URL');
  const { wallet } = await paidFetch(run);
  const { createPaymentHeader, selectPaymentRequirements } = await import('x402/client');
  const { PaymentRequirementsSchema } = await import('x402/types');
  // The requirement the relay asks the client for (read once, untimed: our 402, not the settlement).
  const offered = await fetch(new URL('/relay', run.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: relayBody(run),
  });
  const text = await offered.text();
  if (offered.status !== 402) throw new Error(`POST /relay without X-PAYMENT answered ${offered.status}: ${text}`);
  const { x402Version, accepts } = JSON.parse(text) as { x402Version: number; accepts: unknown[] };
  const requirements = selectPaymentRequirements(
    accepts.map((entry) => PaymentRequirementsSchema.parse(entry)),
    'base-sepolia',
    'exact',
  );
  return async () => {
    const header = await createPaymentHeader(wallet as never, x402Version, requirements);
    const paymentPayload: unknown = JSON.parse(Buffer.from(header, 'base64').toString('utf8'));
    const body = JSON.stringify({ x402Version, paymentPayload, paymentRequirements: requirements });
    return () =>
      fetch(new URL('/settle', facilitatorUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
  };
}

export interface PaidResult extends RunResult {
  failures: string[];
  /** Wall-clock start and end of each call, in milliseconds (for timelines against the target's records). */
  calls: Array<[number, number]>;
}

const wallClock = () => performance.timeOrigin + performance.now();

export async function paidRun(run: PaidRun): Promise<PaidResult> {
  // One call: direct with the paying client, POST /relay with the same client, POST /proxy with
  // the API key, or a settlement on the facilitator (prepared, that is signed, before its clock starts).
  let send: () => Promise<Response> = () => Promise.reject(new Error('no call prepared'));
  let prepare: (() => Promise<() => Promise<Response>>) | undefined;
  if (run.mode === 'direct' || run.mode === 'channel') {
    const pay = run.mode === 'channel' ? await batchFetch(run) : (await paidFetch(run)).fetch;
    send = () => pay(run.targetUrl);
  } else if (run.mode === 'relay' || run.mode === 'relay-channel') {
    const pay = run.mode === 'relay-channel' ? await batchFetch(run) : (await paidFetch(run)).fetch;
    const body = relayBody(run);
    send = () =>
      pay(new URL('/relay', run.url), { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  } else if (run.mode === 'settle') {
    prepare = await settlementCalls(run);
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
    let call = send;
    try {
      if (prepare) call = await prepare();
    } catch (error) {
      errors += 1;
      if (failures.length < 5) failures.push(`preparing the call: ${String(error)}`);
      return;
    }
    const sentAt = performance.now();
    const startedWall = wallClock();
    let status: number;
    try {
      const response = await call();
      const text = await response.text();
      status = response.status;
      // A facilitator answers a refused settlement with 200 and success false: not a settlement.
      if (run.mode === 'settle' && status === 200 && !/"success":\s*true/.test(text)) status = 422;
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
