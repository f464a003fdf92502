/**
 * Bench child: inbound verification of X-PAYMENT as POST /relay runs it, without settlement, on
 * one core (the bench pins this process). It builds the service's own parts from the environment
 * the service gets (loadConfig, createChains, the database) and, for each of many distinct
 * authorizations of the client signed beforehand (x402/client, as x402-fetch signs them), runs
 * what the relay runs before settling: decode and verify against the offers of the relay's 402
 * (verifyClientPaymentHeader: the checks, the signature, the chain's reads and the simulation),
 * then the nonce claim (claimClientPayment: the insert its unique index guards).
 *
 * Calls from the bench: sign {accepts, count} (untimed), verify {concurrency, durationS} (the
 * measured run: each signed payment once, until they run out or the time is up), cleanup (the
 * claimed rows deleted: no job may pick them up later); and post {url, body, concurrency,
 * durationS}: the same payments sent as X-PAYMENT of POST /relay to a service, by status.
 */
import { createWalletClient, defineChain, http as viemHttp, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { createDb } from '../../db/index';
import { systemClock, utcDay } from '../../payments/basics/clock';
import { loadConfig } from '../../payments/basics/config';
import { claimClientPayment } from '../../payments/incoming/store';
import { verifyClientPaymentHeader } from '../../payments/incoming/verify';
import { createChains } from '../../payments/chains/index';
import { DEFAULT_PAYMENT_BOUNDS } from '../../payments/basics/paymentBounds';
import type { PaymentRequirements } from '../../payments/x402/types';
import { serveChild } from './children';
import { Samples, type LatencySummary } from './stats';

export interface VerifyResult {
  verified: number;
  /** Refused payments by reason (a signed payment is expected to pass: any entry here is a fault of the bench). */
  refused: Record<string, number>;
  durationS: number;
  perSecond: number;
  /** CPU time of this process per verification (user + system, every thread), microseconds. */
  cpuUsPerVerification: number;
  latency: LatencySummary;
  /** Whether the run used every signed payment before its time was up. */
  ranOut: boolean;
  /** Start and end of the run on the monotonic clock in microseconds, the clock of V8's CPU profiles. */
  monotonicUs: [number, number];
}

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

const config = loadConfig(process.env);
const databaseUrl = config.databaseUrl;
if (!databaseUrl) throw new Error('the verifier needs DATABASE_URL');
const handle = createDb(databaseUrl);
const chains = await createChains(config);
const deps = { chains, clock: systemClock, paymentBounds: DEFAULT_PAYMENT_BOUNDS };
const clientKey = process.env.BENCH_CLIENT_EVM_PRIVATE_KEY as Hex | undefined;
if (!clientKey) throw new Error('the verifier needs BENCH_CLIENT_EVM_PRIVATE_KEY');
const rpcUrl = process.env.RPC_URL_BASE_SEPOLIA ?? '';
const wallet = createWalletClient({
  account: privateKeyToAccount(clientKey),
  chain: defineChain({
    id: Number(process.env.BENCH_CHAIN_ID ?? 84532),
    name: 'base-sepolia',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  }),
  transport: viemHttp(rpcUrl),
});

let offered: PaymentRequirements[] = [];
let signed: string[] = [];
const claimed: bigint[] = [];

/** Signs `count` payments of the client for the first offer of the relay's 402, each with its own nonce. */
async function sign(message: { accepts: PaymentRequirements[]; count: number }): Promise<{ signed: number }> {
  const { createPaymentHeader } = await import('x402/client');
  offered = message.accepts;
  const requirement = offered[0];
  if (!requirement) throw new Error("the relay's 402 offered nothing");
  signed = [];
  for (let index = 0; index < message.count; index += 1)
    signed.push(await createPaymentHeader(wallet as never, 1, requirement as never));
  return { signed: signed.length };
}

async function verify(message: { concurrency: number; durationS: number }): Promise<VerifyResult> {
  const payments = signed;
  signed = [];
  const refused: Record<string, number> = {};
  const samples = new Samples();
  let next = 0;
  let verified = 0;
  const spendDay = utcDay(new Date());
  const cpuBefore = process.cpuUsage();
  const startedUs = monotonicUs();
  const startedAt = performance.now();
  const deadline = startedAt + message.durationS * 1000;
  const worker = async () => {
    while (next < payments.length && performance.now() < deadline) {
      const value = payments[next++] ?? '';
      const sentAt = performance.now();
      const checked = await verifyClientPaymentHeader({ version: 1, value }, offered, deps);
      if (!checked.ok) {
        refused[checked.reason] = (refused[checked.reason] ?? 0) + 1;
        continue;
      }
      const claim = await claimClientPayment(handle.db, checked.value, {
        targetUrl: 'http://bench.invalid/verify',
        targetMethod: 'GET',
        spendDay,
        mode: 'relay',
      });
      if (!claim.ok) {
        refused[claim.reason] = (refused[claim.reason] ?? 0) + 1;
        continue;
      }
      claimed.push(claim.value.id);
      verified += 1;
      samples.add(performance.now() - sentAt);
    }
  };
  await Promise.all(Array.from({ length: message.concurrency }, worker));
  const durationS = (performance.now() - startedAt) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const endedUs = monotonicUs();
  const done = verified + Object.values(refused).reduce((sum, count) => sum + count, 0);
  return {
    verified,
    refused,
    durationS,
    perSecond: verified / durationS,
    cpuUsPerVerification: done === 0 ? NaN : (cpu.user + cpu.system) / done,
    latency: samples.summary(),
    ranOut: next >= payments.length,
    monotonicUs: [startedUs, endedUs],
  };
}

export interface PostResult {
  responses: number;
  byStatus: Record<string, number>;
  /** The first answers that were not the expected status, for the report. */
  samples: string[];
  durationS: number;
  perSecond: number;
  latency: LatencySummary;
  ranOut: boolean;
}

/** The signed payments sent as X-PAYMENT of POST /relay, `concurrency` at a time, each once. */
async function post(message: {
  url: string;
  body: string;
  expectedStatus: number;
  concurrency: number;
  durationS: number;
}): Promise<PostResult> {
  const payments = signed;
  signed = [];
  const byStatus: Record<string, number> = {};
  const samples: string[] = [];
  const latency = new Samples();
  let next = 0;
  let responses = 0;
  const startedAt = performance.now();
  const deadline = startedAt + message.durationS * 1000;
  const worker = async () => {
    while (next < payments.length && performance.now() < deadline) {
      const payment = payments[next++] ?? '';
      const sentAt = performance.now();
      let status: string;
      try {
        const response = await fetch(message.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-payment': payment },
          body: message.body,
        });
        const text = await response.text();
        status = String(response.status);
        if (response.status !== message.expectedStatus && samples.length < 3)
          samples.push(`${status} ${text.slice(0, 300)}`);
      } catch (error) {
        status = 'error';
        if (samples.length < 3) samples.push(String(error));
      }
      byStatus[status] = (byStatus[status] ?? 0) + 1;
      responses += 1;
      latency.add(performance.now() - sentAt);
    }
  };
  await Promise.all(Array.from({ length: message.concurrency }, worker));
  const durationS = (performance.now() - startedAt) / 1000;
  return {
    responses,
    byStatus,
    samples,
    durationS,
    perSecond: responses / durationS,
    latency: latency.summary(),
    ranOut: next >= payments.length,
  };
}

/** Deletes the rows the nonce claims wrote (never settled: nothing else refers to them). */
async function cleanup(): Promise<{ deleted: number }> {
  let deleted = 0;
  while (claimed.length > 0) {
    const ids = claimed.splice(0, 1_000);
    const result = await handle.db.deleteFrom('relay_transactions').where('id', 'in', ids).executeTakeFirst();
    deleted += Number(result.numDeletedRows);
  }
  return { deleted };
}

serveChild({ sign, verify, cleanup, post }, { pid: process.pid }, async () => {
  await handle.close();
  await chains.close();
});
