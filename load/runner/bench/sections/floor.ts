/**
 * The floor of a paid call on this machine: what each part it cannot do without costs in CPU, one
 * at a time (load/runner/floor.ts, pinned to the service's core, built as production runs it), and
 * the least a paid /proxy, a paid /relay and an inbound verification can cost when made of nothing
 * else: no framework, no code of ours, no logging. A goal below its floor cannot be met with this
 * stack on this machine; the distance between a measured figure and its floor is ours to cut.
 */
import { announcedUrl, cpuMs, spawnChild } from '../../children';
import type { FloorFigures } from '../../floor';
import { fmt, progress, say, SERVER_CORE, type Goal } from '../output';
import type { Bench } from '../setup';
import type { ServiceChild } from '../../serviceChild';
import { bundleChild, VERIFICATIONS_GOAL, VERIFICATIONS_GOAL_PER_S } from './verify';
import { ADDED_BUDGET_MS, ADDED_GOALS, cpuGoalName, PAID_CPU_BUDGET_US, PAID_DB_CPU_BUDGET_US } from './paid';

type Parts = FloorFigures & { inboundUs: number };

/** What each path is made of, counted from its code (docs/architecture.md, the path of a paid call). */
export const PATHS = {
  proxy: {
    inbound: 1,
    outbound: 2, // the target's 402, the paid call
    rpc: 1, // the receipt of our payment
    rpcBatches: 0,
    statements: 2, // credits held with the signed row, credits charged
    recoveries: 0,
    signatures: 1,
    // Written before the payment leaves, and once the chain shows it: two transactions at the least.
    commits: 2,
    // The hold updates the balance and three daily counters and inserts its ledger entry and the
    // payment row (which is the reservation); the charge updates the payment row and inserts a
    // ledger entry. Of these eight rows, each commit's first is counted with the commit (as two of
    // the updates, the dearer kind: a floor must not count more than there is).
    furtherInserts: 3,
    furtherUpdates: 3,
  },
  relay: {
    inbound: 2, // the call that gets our 402, the call with X-PAYMENT
    outbound: 4, // the target's price on each call, the facilitator's /settle, the paid call
    rpc: 2, // the two receipts
    rpcBatches: 1, // the payer's code, nonce state, balance and the dry run, together
    statements: 5, // the idempotency claim, the admission (already settling), settled with our payment recorded, delivered, the answer kept
    recoveries: 1,
    signatures: 1,
    commits: 5, // each statement is its own transaction: each step is written before the next one acts
    // The admission also writes two daily counters and the watch job, beyond the row its commit counts.
    furtherInserts: 1,
    furtherUpdates: 2,
  },
  verification: {
    inbound: 0,
    outbound: 0,
    rpc: 0,
    rpcBatches: 1,
    statements: 1,
    recoveries: 1,
    signatures: 0,
    commits: 1, // the nonce claim
    furtherInserts: 0,
    furtherUpdates: 0,
  },
} as const;

type Path = (typeof PATHS)[keyof typeof PATHS];

/**
 * What each paid route adds to the time of its baseline, waited for one after another: the parts
 * the baseline does not have. The baseline of /proxy is x402-fetch paying the target itself (the
 * same two exchanges with the target, the client signing); of /relay, that call plus the client's
 * own settlement (POST /settle). An inbound hop counts only its server's CPU (the client sends a
 * request in the baseline too); every other part counts its whole wait.
 */
export const ADDED = {
  proxy: {
    inbound: 1,
    outbound: 0, // the 402 and the paid call are the baseline's two exchanges, made by us
    rpc: 1, // the receipt of our payment
    rpcBatches: 0,
    commits: 2, // the hold, the charge
    recoveries: 0,
    signatures: 0, // the client signs in the baseline
  },
  relay: {
    inbound: 2, // both of the client's calls reach us before the target
    outbound: 1, // the target asked for its price again on the call with X-PAYMENT
    rpc: 2,
    rpcBatches: 1,
    commits: 5,
    recoveries: 1,
    signatures: 1,
  },
} as const;

/** The least time a route adds to its baseline (ADDED), in microseconds. */
export function addedFloorUs(added: (typeof ADDED)[keyof typeof ADDED], parts: Parts): number {
  return (
    added.inbound * parts.inboundUs +
    added.outbound * parts.wallUs.httpClient +
    added.rpc * parts.wallUs.rpc +
    added.rpcBatches * parts.wallUs.rpcBatchOfFour +
    added.commits * parts.wallUs.postgresCommit +
    added.recoveries * parts.wallUs.recover +
    added.signatures * parts.wallUs.sign
  );
}

/** Postgres's own CPU for a path's writes at the least: its transactions and their further rows. */
export function postgresFloorUs(path: Path, figures: FloorFigures): number {
  return (
    path.commits * figures.postgresCommitUs +
    path.furtherInserts * figures.postgresRowUs +
    path.furtherUpdates * figures.postgresUpdateUs
  );
}

export function floorUs(path: Path, figures: Parts): number {
  return (
    path.inbound * figures.inboundUs +
    path.outbound * figures.httpClientUs +
    path.rpc * figures.rpcUs +
    path.rpcBatches * figures.rpcBatchOfFourUs +
    path.statements * figures.postgresUs +
    path.recoveries * figures.recoverUs +
    path.signatures * figures.signUs
  );
}

/**
 * The pace of the paced column: one operation every PACED_GAP_MS. A paid call here takes 45 to 60
 * ms one at a time, and its parts are 1 to 45 ms apart (a 402 or a JSON-RPC answer, the target's
 * settlement): 10 ms is on the short side of that, so the paced floor does not count more than
 * there is (a committed insert cost 0.32 ms one every 1 ms, 0.57 every 5, 0.63 every 15, 0.68
 * every 40, and 0.22 back to back).
 */
export const PACED_GAP_MS = 10;

export async function floor(bench: Bench, service: ServiceChild): Promise<void> {
  const { peers, options } = bench;
  say();
  say(
    `## The floor of a paid call: the parts it cannot do without, in CPU per operation on core ${SERVER_CORE}, back to back and one every ${PACED_GAP_MS} ms`,
  );
  const count = Math.max(200, options.paidCalls * 4);
  const [floorScript, expressScript] = await Promise.all([
    bundleChild('load/runner/floor.ts', 'floor'),
    bundleChild('load/runner/plainExpress.ts', 'plain-express'),
  ]);
  const child = await spawnChild({ name: 'floor', core: SERVER_CORE, script: floorScript, plain: true, ipc: true });
  const express = await spawnChild({
    name: 'floor-express',
    core: SERVER_CORE,
    script: expressScript,
    plain: true,
    ipc: true,
    env: { BENCH_CONFIG_BODY: '{"ok":true}' },
  });
  const measure = async (gapMs: number, times: number): Promise<Parts> => {
    progress(`floor: the parts, ${gapMs === 0 ? 'back to back' : `one every ${gapMs} ms`}`);
    const figures = await child.call<FloorFigures>(
      'measure',
      { targetUrl: peers.routes.free, rpcUrl: peers.rpcUrl, databaseUrl: service.databaseUrl, count: times, gapMs },
      600_000,
    );
    progress('floor: an inbound request through express 5');
    const configUrl = `${announcedUrl(express)}/config`;
    await child.call('send', { url: configUrl, count: Math.ceil(times / 4), gapMs: 0 }, 600_000);
    const before = cpuMs(express.pid);
    await child.call('send', { url: configUrl, count: times, gapMs }, 600_000);
    const after = cpuMs(express.pid);
    const inboundUs = before === undefined || after === undefined ? NaN : ((after - before) * 1000) / times;
    return { ...figures, inboundUs };
  };
  try {
    const hot = await measure(0, count);
    const paced = await measure(PACED_GAP_MS, Math.min(count, 200));
    const us = (value: number) => fmt.rps(value);
    const both = (name: string, pick: (parts: Parts) => number) =>
      say(`  ${name.padEnd(66)} ${us(pick(hot)).padStart(8)} ${us(pick(paced)).padStart(12)}`);
    say(
      `  ${'part (CPU per operation, us)'.padEnd(66)} ${'in a row'.padStart(8)} ${`every ${PACED_GAP_MS} ms`.padStart(12)}`,
    );
    both('an inbound request answered by plain express 5 (server side)', (parts) => parts.inboundUs);
    both('an outbound keep-alive HTTP exchange (node:http, client side)', (parts) => parts.httpClientUs);
    both('a JSON-RPC call through our transport (eth_blockNumber)', (parts) => parts.rpcUs);
    both('four JSON-RPC calls made together (one batch)', (parts) => parts.rpcBatchOfFourUs);
    both('a Postgres round trip (pg, select 1)', (parts) => parts.postgresUs);
    both(`an ECDSA recovery of a signer (recoverSigner, ${hot.secp256k1} secp256k1)`, (parts) => parts.recoverUs);
    both(`a signature of a digest (our account's sign, ${hot.secp256k1} secp256k1)`, (parts) => parts.signUs);
    both("Postgres's CPU (its backend): a committed one-row insert", (parts) => parts.postgresCommitUs);
    both("Postgres's CPU: each further row that transaction inserts", (parts) => parts.postgresRowUs);
    both("Postgres's CPU: each further row it updates (a counter)", (parts) => parts.postgresUpdateUs);
    const line = (name: string, path: Path) =>
      `  ${name}: ${partsText([
        [path.inbound, 'inbound'],
        [path.outbound, 'outbound'],
        [path.rpc, 'JSON-RPC'],
        [path.rpcBatches, 'batch of four JSON-RPC'],
        [path.statements, 'statements'],
        [path.recoveries, 'recovery'],
        [path.signatures, 'signature'],
      ])} = ${us(floorUs(path, hot))} us at the least in a row, ${us(floorUs(path, paced))} us paced`;
    say(
      `  ${'wait (median wall time per operation, us)'.padEnd(66)} ${'in a row'.padStart(8)} ${`every ${PACED_GAP_MS} ms`.padStart(12)}`,
    );
    both('an outbound keep-alive HTTP exchange', (parts) => parts.wallUs.httpClient);
    both('a JSON-RPC call', (parts) => parts.wallUs.rpc);
    both('four JSON-RPC calls made together', (parts) => parts.wallUs.rpcBatchOfFour);
    both('a committed one-row insert, from the client (its flush included)', (parts) => parts.wallUs.postgresCommit);
    both('an ECDSA recovery of a signer', (parts) => parts.wallUs.recover);
    both('a signature of a digest', (parts) => parts.wallUs.sign);
    say(line('paid /proxy', PATHS.proxy));
    say(line('paid /relay', PATHS.relay));
    say(line('one inbound verification', PATHS.verification));
    const database = (name: string, path: Path) =>
      `  ${name}, Postgres's CPU: ${path.commits} committed writes + ${path.furtherInserts} rows inserted + ${path.furtherUpdates} updated = ` +
      `${us(postgresFloorUs(path, hot))} us at the least in a row, ${us(postgresFloorUs(path, paced))} us paced (goal ${us(PAID_DB_CPU_BUDGET_US[name === 'paid /proxy' ? '/proxy' : '/relay'])} us)`;
    if (Number.isFinite(hot.postgresCommitUs)) {
      say(database('paid /proxy', PATHS.proxy));
      say(database('paid /relay', PATHS.relay));
    } else {
      say("  Postgres's own CPU was not measured: its backend is not a process of this machine");
    }
    const addedLine = (name: string, added: (typeof ADDED)[keyof typeof ADDED], baseline: string) =>
      `  ${name} adds to ${baseline} at the least: ${partsText([
        [added.inbound, "inbound (its server's CPU)"],
        [added.outbound, 'outbound exchange'],
        [added.rpc, 'JSON-RPC'],
        [added.rpcBatches, 'batch of four'],
        [added.commits, 'committed writes'],
        [added.recoveries, 'recovery'],
        [added.signatures, 'signature'],
      ])} = ${fmt.ms(addedFloorUs(added, hot) / 1000)} ms in a row, ${fmt.ms(addedFloorUs(added, paced) / 1000)} ms paced`;
    say(addedLine('paid /proxy', ADDED.proxy, 'the direct call'));
    say(addedLine('paid /relay', ADDED.relay, "the direct call and the client's settlement"));
    const verification = floorUs(PATHS.verification, hot);
    say(
      `  so one core verifies at most ${fmt.rps(1e6 / verification)} payments a second (the recovery alone: ${fmt.rps(1e6 / hot.recoverUs)})`,
    );
    const figuresOf = (parts: Parts): Parts & PathFloors => ({
      ...parts,
      proxyUs: floorUs(PATHS.proxy, parts),
      relayUs: floorUs(PATHS.relay, parts),
      proxyPostgresUs: postgresFloorUs(PATHS.proxy, parts),
      relayPostgresUs: postgresFloorUs(PATHS.relay, parts),
      verificationUs: floorUs(PATHS.verification, parts),
      proxyAddedUs: addedFloorUs(ADDED.proxy, parts),
      relayAddedUs: addedFloorUs(ADDED.relay, parts),
    });
    const floors = {
      ...figuresOf(hot),
      paced: { gapMs: PACED_GAP_MS, ...figuresOf(paced) },
      paths: PATHS,
      added: ADDED,
    };
    bench.results.floor = floors;
    annotateGoals(bench, floors);
  } finally {
    await Promise.all([child.stop(), express.stop()]);
  }
}

/** "1 inbound + 2 JSON-RPC": the parts a path counts, those it has none of left out. */
function partsText(counts: Array<[number, string]>): string {
  return counts
    .filter(([count]) => count > 0)
    .map(([count, name]) => `${count} ${name}`)
    .join(' + ');
}

/** The least each path costs, from the parts measured one way. */
interface PathFloors {
  proxyUs: number;
  relayUs: number;
  proxyPostgresUs: number;
  relayPostgresUs: number;
  verificationUs: number;
  proxyAddedUs: number;
  relayAddedUs: number;
}

/**
 * Each goal of CPU, added time or verifications a second of the sections that ran before this one
 * gets its floors: in a row (one operation after another) and paced (as a paid call makes them). A
 * goal whose budget is under its paced floor is short of what this stack can reach on this
 * machine, not only of our code.
 */
function annotateGoals(bench: Bench, floors: PathFloors & { paced: PathFloors }): void {
  const ms = (us: number) => fmt.ms(us / 1000);
  const byGoal: Array<[string, number, number, number]> = [
    [cpuGoalName('/proxy', 'service'), PAID_CPU_BUDGET_US['/proxy'], floors.proxyUs, floors.paced.proxyUs],
    [
      cpuGoalName('/proxy', 'postgres'),
      PAID_DB_CPU_BUDGET_US['/proxy'],
      floors.proxyPostgresUs,
      floors.paced.proxyPostgresUs,
    ],
    [cpuGoalName('/relay', 'service'), PAID_CPU_BUDGET_US['/relay'], floors.relayUs, floors.paced.relayUs],
    [
      cpuGoalName('/relay', 'postgres'),
      PAID_DB_CPU_BUDGET_US['/relay'],
      floors.relayPostgresUs,
      floors.paced.relayPostgresUs,
    ],
    [ADDED_GOALS.proxy, ADDED_BUDGET_MS.proxy * 1000, floors.proxyAddedUs, floors.paced.proxyAddedUs],
    [ADDED_GOALS.relay, ADDED_BUDGET_MS.relay * 1000, floors.relayAddedUs, floors.paced.relayAddedUs],
  ];
  // Verifications a second on one core: at most one second over the floor of one verification.
  const verifications = bench.goals.find((candidate) => candidate.goal === VERIFICATIONS_GOAL);
  if (verifications && Number.isFinite(floors.paced.verificationUs)) {
    const [inRow, paced] = [1e6 / floors.verificationUs, 1e6 / floors.paced.verificationUs];
    const above = !verifications.met && inRow < VERIFICATIONS_GOAL_PER_S ? '; the goal is above the floor' : '';
    verifications.figure += ` (floor: at most ${fmt.rps(inRow)}/s in a row, ${fmt.rps(paced)}/s paced${above})`;
    withinTwice(verifications, floors.paced.verificationUs);
  }
  for (const [name, budgetUs, inRow, paced] of byGoal) {
    const goal = bench.goals.find((candidate) => candidate.goal === name);
    if (!goal || !Number.isFinite(paced)) continue;
    const below = !goal.met && paced > budgetUs ? '; the budget is below the paced floor' : '';
    goal.figure += ` (floor ${ms(inRow)} ms in a row, ${ms(paced)} ms paced${below})`;
    withinTwice(goal, paced);
  }
}

/**
 * Whether a goal's measured cost is within twice its paced floor (issue 27's test for a goal not
 * met). Verifications compare our CPU per verification with the floor's CPU per verification.
 */
function withinTwice(goal: Goal, pacedUs: number): void {
  if (goal.measuredUs === undefined || !Number.isFinite(goal.measuredUs)) return;
  goal.floor = { pacedUs, withinTwice: goal.measuredUs <= 2 * pacedUs };
}
