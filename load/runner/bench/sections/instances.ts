/**
 * Several instances on one Postgres (load/runner/instances.ts): two API instances and a worker
 * behind the round robin. Each instance's /proxy cap under overload through the balancer, and
 * paid calls against credits for exactly K calls and a key's daily cap for exactly L calls.
 */
import { proxyCredits } from '../../../../payments/accounts/fees';
import type { HoldStats } from '../../caps';
import { defined } from '../../checked';
import {
  capsAcrossInstances,
  capsProblems,
  clusterDb,
  paidAcrossInstances,
  paidProblems,
  seedPaidAccount,
  startCluster,
  type PaidAcross,
} from '../../instances';
import { requestOf, scenarios } from '../../scenarios';
import { progress, say, SERVER_CORE } from '../output';
import type { Bench } from '../setup';

export async function instances(bench: Bench): Promise<void> {
  const { options, peers } = bench;
  const cap = options.overloadCap;
  const factor = scenarios.caps.benchOverloadFactor;
  const databaseUrl = defined(bench.sharedDatabaseUrl, 'the shared database of the bench');
  // Credits for K calls: 3 x K calls at once, half on each instance, stay under the caps.
  const allowed = Math.max(1, Math.min(options.paidCalls, Math.floor((2 * cap) / 3)));
  const limitAllowed = Math.max(1, Math.ceil(allowed / 2));
  const paidUrl = defined(peers.routes.paid, "the target's /paid route");
  const perCall = proxyCredits(BigInt(peers.priceMicroUsdc), 3).totalCredits;
  say();
  say(
    `## Two API instances (RUN_WORKER=false) and a worker on one Postgres behind a round robin: CAP_PROXY=${cap} each`,
  );
  progress('instances: starting two API instances, a worker and the round robin');
  const cluster = await startCluster({
    dataDir: bench.dataDir,
    databaseUrl,
    core: SERVER_CORE,
    env: {
      NETWORKS: peers.network,
      RPC_URL_BASE_SEPOLIA: peers.rpcUrl,
      EVM_PRIVATE_KEY: peers.serviceEvmPrivateKey,
      FACILITATOR_URL: peers.facilitatorUrl,
      SSRF_ALLOW_HOSTS: new URL(peers.targetUrl).host,
      LOG_LEVEL: options.logLevel,
      CAP_PROXY: String(cap),
      CAP_RELAY: String(cap),
      CAP_WEBHOOKS: String(cap),
    },
  });
  const handle = clusterDb(databaseUrl);
  try {
    const paidAtTarget = async () =>
      (
        await bench.peersChild.call<Array<{ route: string; paid: boolean; status: number }>>('requests', {
          last: 10_000,
        })
      ).filter((request) => request.paid && request.status === 200).length;
    progress(`instances: /proxy overload, ${factor * cap} clients per instance`);
    const holdAccount = await seedPaidAccount(handle.db, 0n, 1_000n);
    const caps = await capsAcrossInstances({
      cluster,
      cap,
      factor,
      durationS: Math.max(3, options.durationS),
      request: requestOf('proxyHold', { holdUrl: peers.routes.hold, apiKey: holdAccount.key }),
      target: {
        reset: () => bench.peersChild.call('reset'),
        stats: () => bench.peersChild.call<HoldStats>('holdStats'),
        release: () => bench.peersChild.call('holdRelease', {}),
      },
    });
    say(
      `  ${caps.clients} clients through the balancer; each instance's GET /metrics polled ${caps.metricsPolls} times`,
    );
    say('  instance              admitted  refused (429)  most in flight (/metrics)  429s it counted');
    for (const instance of caps.instances) {
      say(
        `  ${instance.upstream.padEnd(20)}  ${`${instance.admitted}/${cap}`.padStart(8)}  ${String(instance.refused).padStart(13)}  ${String(instance.maxInFlight).padStart(25)}  ${String(instance.serverRefused).padStart(15)}`,
      );
    }
    say(`  most calls waiting at the target at once: ${caps.maxWaitingAtTarget} (2 x ${cap})`);

    await bench.peersChild.call('reset');
    progress(`instances: ${3 * allowed} paid calls at once against credits for ${allowed}`);
    const creditsAccount = await seedPaidAccount(handle.db, BigInt(allowed) * perCall, 10_000_000n);
    const credits = await paidAcrossInstances({
      cluster,
      db: handle.db,
      kind: 'credits',
      account: creditsAccount,
      allowed,
      calls: 3 * allowed,
      creditsPerCall: perCall,
      dailyCap: 10_000_000n,
      paidUrl,
      paidAtTarget,
    });
    await bench.peersChild.call('reset');
    progress(`instances: ${3 * limitAllowed} paid calls at once against a daily cap for ${limitAllowed}`);
    const dailyCap = BigInt(limitAllowed) * perCall;
    const limitAccount = await seedPaidAccount(handle.db, 10n * dailyCap, dailyCap);
    const limit = await paidAcrossInstances({
      cluster,
      db: handle.db,
      kind: 'limit',
      account: limitAccount,
      allowed: limitAllowed,
      calls: 3 * limitAllowed,
      creditsPerCall: perCall,
      dailyCap,
      paidUrl,
      paidAtTarget,
    });
    for (const report of [credits, limit]) say(paidLine(report));

    const capIssues = capsProblems(caps);
    const paidIssues = [...paidProblems(credits), ...paidProblems(limit)];
    bench.goals.push({
      goal: 'each instance holds its cap behind a round robin',
      figure:
        caps.instances
          .map((instance) => `${instance.upstream}: ${instance.admitted}/${cap} admitted, ${instance.refused} refused`)
          .join('; ') + (capIssues.length > 0 ? `; ${capIssues.join('; ')}` : ''),
      met: capIssues.length === 0,
    });
    bench.goals.push({
      goal: 'credits and daily limits exact across instances',
      figure:
        `credits: ${credits.paid}/${credits.allowed} paid, balance ${credits.balanceBefore} -> ${credits.balanceAfter}; ` +
        `daily cap: ${limit.paid}/${limit.allowed} paid, key spent ${limit.keySpent} of ${limit.dailyCap}` +
        (paidIssues.length > 0 ? `; ${paidIssues.join('; ')}` : ''),
      met: paidIssues.length === 0,
    });
    bench.results.instances = { caps, credits, limit };
  } finally {
    await handle.close();
    await cluster.stop();
  }
}

function paidLine(report: PaidAcross): string {
  const what = report.kind === 'credits' ? 'credits for exactly' : 'a daily cap for exactly';
  const refusal = report.kind === 'credits' ? '402' : '429 spend_limit_exceeded';
  const perInstance = Object.entries(report.byInstance)
    .map(([upstream, statuses]) => `${upstream} ${JSON.stringify(statuses)}`)
    .join(', ');
  return (
    `  ${report.calls} paid calls at once, ${what} ${report.allowed}: ${report.paid} paid, ${report.refused} ${refusal}, ${report.other.length} other` +
    ` (${perInstance}; ${report.capacityRetries} sent again after a cap's 429)\n` +
    `    ledger: charged ${report.ledger.charge}, reserved ${report.ledger.reserve}, released ${report.ledger.release} credits (${report.creditsPerCall} a call); ` +
    `balance ${report.balanceBefore} -> ${report.balanceAfter}; key's daily counter ${report.keySpent} of ${report.dailyCap}; ` +
    `paid at the target ${report.paidAtTarget ?? '-'}; payments ${JSON.stringify(report.paymentStates)}`
  );
}
