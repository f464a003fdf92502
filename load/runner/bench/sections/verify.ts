/**
 * Inbound verification: X-PAYMENT verifications per second on one core, as POST /relay runs them
 * before settling (decode, the checks against the offers of its 402, the signature, the chain's
 * reads and simulation, the nonce claim), in a child process pinned to one core of its own
 * (load/runner/verifier.ts) against the bench's chain and the service's database. The HTTP route
 * cannot stop there: a valid payment goes on to be settled. With the profile section, the child
 * writes a CPU profile, and its summary over the measured run is printed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { cpuMs, descendantsCpuMs, ROOT, spawnChild } from '../../children';
import { formatProfile, summarizeProfile } from '../../profile';
import type { ServiceChild } from '../../serviceChild';
import type { VerifyResult } from '../../verifier';
import { fmt, LOAD_CORE, progress, say } from '../output';
import { BASE_SEPOLIA_CHAIN_ID, type Bench } from '../setup';

export const VERIFICATIONS_GOAL_PER_S = 2_000;
const CONCURRENCY = 16;

export async function verify(bench: Bench, service: ServiceChild): Promise<void> {
  const { options, peers, bindings } = bench;
  say();
  say(
    `## Inbound verification: X-PAYMENT verified and its nonce claimed as POST /relay does before settling, ${CONCURRENCY} at a time, in one process on core ${LOAD_CORE} (the chain and Postgres on the other)`,
  );
  // The offers of the relay's 402 for the paid target: what the payments are verified against.
  const offered = await fetch(new URL('/relay', service.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_url: bindings.paidUrl, method: 'GET' }),
  });
  const text = await offered.text();
  if (offered.status !== 402) throw new Error(`POST /relay without X-PAYMENT answered ${offered.status}: ${text}`);
  const { accepts } = JSON.parse(text) as { accepts: unknown[] };

  const profileDir = options.sections.has('profile')
    ? path.join(ROOT, '.tmp', 'bench-profiles', String(bench.results.runId), 'verify')
    : undefined;
  const verifier = await spawnChild({
    name: 'verifier',
    core: LOAD_CORE,
    script: 'load/runner/verifier.ts',
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
  try {
    const run = (durationS: number) =>
      verifier.call<VerifyResult>('verify', { concurrency: CONCURRENCY, durationS }, 600_000);
    progress('verify: signing the warm-up payments');
    await verifier.call('sign', { accepts, count: 300 }, 600_000);
    progress('verify: warm-up');
    const warmup = await run(options.warmupS);
    // Enough payments for the measured run at the warm-up's pace, and a margin (signing takes time too).
    const count = Math.min(12_000, Math.max(500, Math.ceil(warmup.perSecond * options.durationS * 1.5)));
    progress(`verify: signing ${count} payments`);
    await verifier.call('sign', { accepts, count }, 600_000);
    progress('verify: measured run');
    const dbBefore = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
    const chainBefore = cpuMs(bench.peersChild.pid);
    const result = await run(options.durationS);
    const chainAfter = cpuMs(bench.peersChild.pid);
    const dbAfter = bench.embeddedDatabase ? descendantsCpuMs(service.pid) : undefined;
    await verifier.call('cleanup', {}, 120_000);
    const done = result.verified + Object.values(result.refused).reduce((sum, count) => sum + count, 0);
    const perVerification = (before: number | undefined, after: number | undefined) =>
      before === undefined || after === undefined || done === 0 ? NaN : ((after - before) * 1000) / done;
    const dbUs = perVerification(dbBefore, dbAfter);
    const chainUs = perVerification(chainBefore, chainAfter);
    const refusals = Object.entries(result.refused)
      .map(([reason, count]) => `${count} ${reason}`)
      .join(', ');
    const micro = (value: number) => (Number.isFinite(value) ? fmt.rps(value) : '-');
    say(
      `  ${fmt.rps(result.perSecond)} verifications/s over ${result.durationS.toFixed(1)} s (${result.verified.toLocaleString('en-US')} payments${result.ranOut ? ', every one signed' : ''}); ` +
        `latency p50 ${fmt.ms(result.latency.p50)} ms, p99 ${fmt.ms(result.latency.p99)} ms${refusals ? `; REFUSED: ${refusals}` : ''}`,
    );
    say(
      `  CPU per verification: ${micro(result.cpuUsPerVerification)} us ours (at most ${micro(1e6 / result.cpuUsPerVerification)}/s on one core), ` +
        `${micro(dbUs)} us of Postgres (the claim's insert), ${micro(chainUs)} us of the chain's node and peers (4 JSON-RPC calls: code, nonce state, balance, simulation)`,
    );
    const warmupRefusals =
      Object.keys(warmup.refused).length > 0 ? ` (warm-up refused ${JSON.stringify(warmup.refused)})` : '';
    bench.goals.push({
      goal: `>= ${fmt.rps(VERIFICATIONS_GOAL_PER_S)} X-PAYMENT verifications/s on one core (decode, signature, nonce claim; no settlement)`,
      figure:
        `${fmt.rps(result.perSecond)}/s at ${CONCURRENCY} at a time; ${micro(result.cpuUsPerVerification)} us of our CPU each ` +
        `(a core's worth: ${micro(1e6 / result.cpuUsPerVerification)}/s), Postgres ${micro(dbUs)} us, chain ${micro(chainUs)} us${warmupRefusals}`,
      met: result.perSecond >= VERIFICATIONS_GOAL_PER_S && Object.keys(result.refused).length === 0,
    });
    bench.results.verify = { warmup, result, dbCpuUsPerVerification: dbUs, chainCpuUsPerVerification: chainUs };
    if (profileDir) {
      await verifier.stop();
      printProfile(profileDir, result);
    }
  } finally {
    await verifier.stop();
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
