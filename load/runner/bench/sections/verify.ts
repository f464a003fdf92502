/**
 * Inbound verification: X-PAYMENT verifications per second on one core, as POST /relay runs them
 * before settling (decode, the checks against the offers of its 402, the signature, the chain's
 * reads and simulation, the nonce claim), in a child process pinned to one core of its own
 * (load/runner/verifier.ts) against the bench's chain and the service's database. The HTTP route
 * cannot stop there on its own: a valid payment goes on to be settled; the same payments are also
 * sent through it to a service whose daily relay limit refuses them after the claim (the route's
 * cost, printed beside the in-process figure). With the profile section, the child
 * writes a CPU profile, and its summary over the measured run is printed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { cpuMs, descendantsCpuMs, ROOT, spawnChild, type Child } from '../../children';
import { formatProfile, summarizeProfile } from '../../profile';
import type { ServiceChild } from '../../serviceChild';
import type { PostResult, VerifyResult } from '../../verifier';
import { fmt, LOAD_CORE, progress, say } from '../output';
import { BASE_SEPOLIA_CHAIN_ID, type Bench } from '../setup';

export const VERIFICATIONS_GOAL_PER_S = 5_000;
/** The goal line of verifications a second (the floor section finds it by name). */
export const VERIFICATIONS_GOAL = `>= ${fmt.rps(VERIFICATIONS_GOAL_PER_S)} X-PAYMENT verifications/s on one core (decode, signature, nonce claim; no settlement)`;
const CONCURRENCY = 16;

/** The offers of the relay's 402 for the paid target, from `serviceUrl`: what the payments are verified against. */
async function relayOffers(serviceUrl: string, body: string): Promise<unknown[]> {
  const offered = await fetch(new URL('/relay', serviceUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  const text = await offered.text();
  if (offered.status !== 402) throw new Error(`POST /relay without X-PAYMENT answered ${offered.status}: ${text}`);
  return (JSON.parse(text) as { accepts: unknown[] }).accepts;
}

const micro = (value: number | undefined) => (value !== undefined && Number.isFinite(value) ? fmt.rps(value) : '-');

export async function verify(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, peers, bindings } = bench;
  say();
  say(
    `## Inbound verification: X-PAYMENT verified and its nonce claimed as POST /relay does before settling, ${CONCURRENCY} at a time, in one process on core ${LOAD_CORE} (the chain and Postgres on the other)`,
  );
  const body = JSON.stringify({ api_url: bindings.paidUrl, method: 'GET' });
  const accepts = await relayOffers(service.url, body);
  const profileDir = options.sections.has('profile')
    ? path.join(ROOT, '.tmp', 'bench-profiles', String(bench.results.runId), 'verify')
    : undefined;
  // Built like the service when the bench runs it built: our code bundled, run by plain node.
  const built = options.runtime === 'built' ? await bundleVerifier() : undefined;
  const verifier = await spawnChild({
    name: 'verifier',
    core: LOAD_CORE,
    script: built ?? 'load/runner/verifier.ts',
    plain: built !== undefined,
    ipc: true,
    echoStderr: true,
    ...(profileDir ? { nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] } : {}),
    env: {
      NETWORKS: peers.network,
      RPC_URL_BASE_SEPOLIA: peers.rpcUrl,
      EVM_PRIVATE_KEY: peers.serviceEvmPrivateKey,
      FACILITATOR_URL: peers.facilitatorUrl,
      DATABASE_URL: service.databaseUrl,
      LOG_LEVEL: options.logLevel,
      BENCH_CLIENT_EVM_PRIVATE_KEY: peers.clientEvmPrivateKey,
      BENCH_CHAIN_ID: String(BASE_SEPOLIA_CHAIN_ID),
    },
  });
  const sign = (offers: unknown[], count: number) => verifier.call('sign', { accepts: offers, count }, 600_000);
  // Enough payments for a measured run at the warm-up's pace, and a margin (signing takes time too).
  const enough = (perSecond: number) => Math.min(12_000, Math.max(500, Math.ceil(perSecond * options.durationS * 1.5)));
  // CPU of the database (the first service's embedded Postgres) and of the chain (the peers) over a run.
  const around = async <T>(load: () => Promise<T>) => {
    const dbBefore = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
    const chainBefore = cpuMs(bench.peersChild.pid);
    const result = await load();
    const chainAfter = cpuMs(bench.peersChild.pid);
    const dbAfter = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
    const per = (count: number, before: number | undefined, after: number | undefined) =>
      before === undefined || after === undefined || count === 0 ? NaN : ((after - before) * 1000) / count;
    return {
      result,
      dbUsPer: (count: number) => per(count, dbBefore, dbAfter),
      chainUsPer: (count: number) => per(count, chainBefore, chainAfter),
    };
  };
  try {
    const http = await throughTheRoute(bench, service, verifier, { body, sign, enough, around });
    const run = (durationS: number) =>
      verifier.call<VerifyResult>('verify', { concurrency: CONCURRENCY, durationS }, 600_000);
    progress('verify: signing the warm-up payments');
    await sign(accepts, 300);
    progress('verify: warm-up');
    const warmup = await run(options.warmupS);
    const count = enough(warmup.perSecond);
    progress(`verify: signing ${count} payments`);
    await sign(accepts, count);
    progress('verify: measured run');
    const measured = await around(() => run(options.durationS));
    const result = measured.result;
    await verifier.call('cleanup', {}, 120_000);
    const done = result.verified + Object.values(result.refused).reduce((sum, each) => sum + each, 0);
    const dbUs = measured.dbUsPer(done);
    const chainUs = measured.chainUsPer(done);
    const refusals = Object.entries(result.refused)
      .map(([reason, each]) => `${each} ${reason}`)
      .join(', ');
    say(
      `  in process (verifyClientPaymentHeader, then recordClientPayment): ${fmt.rps(result.perSecond)} verifications/s over ${result.durationS.toFixed(1)} s ` +
        `(${result.verified.toLocaleString('en-US')} payments${result.ranOut ? ', every one signed' : ''}); ` +
        `latency p50 ${fmt.ms(result.latency.p50)} ms, p99 ${fmt.ms(result.latency.p99)} ms${refusals ? `; REFUSED: ${refusals}` : ''}`,
    );
    say(
      `    CPU per verification: ${micro(result.cpuUsPerVerification)} us ours (at most ${micro(1e6 / result.cpuUsPerVerification)}/s on one core), ` +
        `${micro(dbUs)} us of Postgres (the claim's insert), ${micro(chainUs)} us of the chain's node and peers (4 JSON-RPC calls: code, nonce state, balance, simulation)`,
    );
    if (http) say(http.line);
    const warmupRefusals =
      Object.keys(warmup.refused).length > 0 ? ` (warm-up refused ${JSON.stringify(warmup.refused)})` : '';
    bench.goals.push({
      goal: VERIFICATIONS_GOAL,
      figure:
        `${fmt.rps(result.perSecond)}/s in process at ${CONCURRENCY} at a time; ${micro(result.cpuUsPerVerification)} us of our CPU each ` +
        `(a core's worth: ${micro(1e6 / result.cpuUsPerVerification)}/s), Postgres ${micro(dbUs)} us, chain ${micro(chainUs)} us${warmupRefusals}` +
        (http ? `; through POST /relay: ${http.figure}` : ''),
      met: result.perSecond >= VERIFICATIONS_GOAL_PER_S && Object.keys(result.refused).length === 0,
      ...(Number.isFinite(result.cpuUsPerVerification) ? { measuredUs: result.cpuUsPerVerification } : {}),
    });
    bench.results.verify = {
      warmup,
      result,
      dbCpuUsPerVerification: dbUs,
      chainCpuUsPerVerification: chainUs,
      ...(http ? { http: http.results } : {}),
    };
    if (profileDir) {
      await verifier.stop();
      printProfile(profileDir, result);
    }
  } finally {
    await verifier.stop();
  }
}

interface RouteRig {
  body: string;
  sign: (offers: unknown[], count: number) => Promise<unknown>;
  enough: (perSecond: number) => number;
  around: <T>(load: () => Promise<T>) => Promise<{
    result: T;
    dbUsPer: (count: number) => number;
    chainUsPer: (count: number) => number;
  }>;
}

/**
 * The same verification through the HTTP route: a service whose daily relay limit per wallet is 0
 * answers a valid payment 429 after verifying it and claiming its nonce (the admission's
 * transaction, rolled back by the limit), before anything is settled. That path also prices the
 * call by asking the target (our 402's offers) and keeps the idempotency record of the payment.
 */
async function throughTheRoute(
  bench: Bench,
  service: ServiceChild,
  verifier: Child,
  { body, sign, enough, around }: RouteRig,
): Promise<{ line: string; figure: string; results: unknown } | undefined> {
  const { options } = bench;
  const refusing = await bench.startService('service-verify', { RELAY_DAILY_PER_WALLET_USD: '0' });
  try {
    const url = new URL('/relay', refusing.url).toString();
    const accepts = await relayOffers(refusing.url, body);
    const post = (durationS: number) =>
      verifier.call<PostResult>(
        'post',
        { url, body, expectedStatus: 429, concurrency: CONCURRENCY, durationS },
        600_000,
      );
    progress('verify: POST /relay refused at the limit, warm-up');
    await sign(accepts, 200);
    const warmup = await post(options.warmupS);
    await sign(accepts, enough(warmup.perSecond));
    progress('verify: POST /relay refused at the limit, measured run');
    const cpuBefore = cpuMs(refusing.pid);
    const measured = await around(() => post(options.durationS));
    const cpuAfter = cpuMs(refusing.pid);
    const result = measured.result;
    const serviceUs =
      cpuBefore === undefined || cpuAfter === undefined || result.responses === 0
        ? NaN
        : ((cpuAfter - cpuBefore) * 1000) / result.responses;
    const dbUs = measured.dbUsPer(result.responses);
    const chainUs = measured.chainUsPer(result.responses);
    const others = Object.entries(result.byStatus).filter(([status]) => status !== '429');
    const unexpected =
      others.length === 0
        ? ''
        : `; NOT 429: ${others.map(([status, count]) => `${count} ${status}`).join(', ')} (first: ${result.samples[0] ?? '-'})`;
    return {
      line:
        `  through POST /relay (a service whose daily limit per wallet is 0: each valid payment verified, claimed, then refused 429): ` +
        `${fmt.rps(result.perSecond)} req/s, p50 ${fmt.ms(result.latency.p50)} ms, p99 ${fmt.ms(result.latency.p99)} ms${unexpected}\n` +
        `    CPU per request: ${micro(serviceUs)} us of the service (at most ${micro(1e6 / serviceUs)}/s on one core; with the pricing call to the target and the idempotency record), ` +
        `${micro(dbUs)} us of Postgres, ${micro(chainUs)} us of the chain and peers (the target's 402 included)`,
      figure: `${fmt.rps(result.perSecond)} req/s, ${micro(serviceUs)} us of service CPU each${others.length > 0 ? ' (some not 429!)' : ''}`,
      results: {
        warmup,
        result,
        serviceCpuUsPerRequest: serviceUs,
        dbCpuUsPerRequest: dbUs,
        chainCpuUsPerRequest: chainUs,
      },
    };
  } catch (error) {
    say(`  through POST /relay: not measured (${error instanceof Error ? error.message : String(error)})`);
    return undefined;
  } finally {
    await bench.stopService(refusing);
  }
}

/**
 * The verifier's main-thread profile over its measured run only (not the signing before it): the
 * child timed the run on the monotonic clock, which V8's profile timestamps use as well.
 */
function printProfile(dir: string, result: VerifyResult): void {
  const file = readdirSync(dir)
    .filter((entry) => entry.endsWith('.cpuprofile'))
    .sort()[0];
  say();
  say('## CPU profile of the inbound verification (the verifier child over its measured run)');
  if (!file) {
    say('  no profile was written');
    return;
  }
  const profilePath = path.join(dir, file);
  const { endTime } = JSON.parse(readFileSync(profilePath, 'utf8')) as { endTime: number };
  const [startedUs, endedUs] = result.monotonicUs;
  say(`  ${path.relative(ROOT, profilePath)}`);
  const summary = summarizeProfile(profilePath, 20, {
    fromMsBeforeEnd: (endTime - startedUs) / 1000,
    toMsBeforeEnd: (endTime - endedUs) / 1000,
  });
  say(formatProfile(summary, result.verified).replace(/^/gm, '  '));
}

/**
 * load/runner/verifier.ts bundled as tools/build.mjs bundles the service (our code in one file,
 * packages from node_modules), one level below the root as dist/ is; returns its path.
 */
/** A bench child bundled as production bundles our code (dependencies left to node_modules), for plain node. */
export async function bundleChild(entry: string, name: string): Promise<string> {
  const { build } = await import('esbuild');
  const outfile = path.join(ROOT, '.tmp', `bench-${name}.mjs`);
  await build({
    absWorkingDir: ROOT,
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20.18',
    packages: 'external',
    logLevel: 'warning',
  });
  return path.relative(ROOT, outfile);
}

const bundleVerifier = () => bundleChild('load/runner/verifier.ts', 'verifier');
