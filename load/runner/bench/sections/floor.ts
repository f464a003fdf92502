/**
 * The floor of a paid call on this machine: what each part it cannot do without costs in CPU, one
 * at a time (load/runner/floor.ts, pinned to the service's core, built as production runs it), and
 * the least a paid /proxy, a paid /relay and an inbound verification can cost when made of nothing
 * else: no framework, no code of ours, no logging. A goal below its floor cannot be met with this
 * stack on this machine; the distance between a measured figure and its floor is ours to cut.
 */
import { announcedUrl, cpuMs, spawnChild } from '../../children';
import type { FloorFigures } from '../../floor';
import { fmt, progress, say, SERVER_CORE } from '../output';
import type { Bench } from '../setup';
import type { ServiceChild } from '../../serviceChild';
import { bundleChild } from './verify';
import { PAID_DB_CPU_BUDGET_US } from './paid';

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
    // The hold updates the balance and three daily counters and inserts the reservation, its
    // ledger entry and the payment row; the charge updates the payment row and the reservation and
    // inserts a ledger entry. Of these ten rows, each commit's first is counted with the commit
    // (as two of the updates, the dearer kind: a floor must not count more than there is).
    furtherInserts: 4,
    furtherUpdates: 4,
  },
  relay: {
    inbound: 2, // the call that gets our 402, the call with X-PAYMENT
    outbound: 4, // the target's price on each call, the facilitator's /settle, the paid call
    rpc: 2, // the two receipts
    rpcBatches: 1, // the payer's code, nonce state, balance and the dry run, together
    statements: 7, // the idempotency claim, the admission, the settlement claimed, settled, our payment recorded, delivered, the answer kept
    recoveries: 1,
    signatures: 1,
    commits: 7, // each statement is its own transaction: each step is written before the next one acts
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

/** Postgres's own CPU for a path's writes at the least: its transactions and their further rows. */
export function postgresFloorUs(path: Path, figures: FloorFigures): number {
  return (
    path.commits * figures.postgresCommitUs +
    path.furtherInserts * figures.postgresRowUs +
    path.furtherUpdates * figures.postgresUpdateUs
  );
}

export function floorUs(path: Path, figures: FloorFigures & { inboundUs: number }): number {
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

export async function floor(bench: Bench, service: ServiceChild): Promise<void> {
  const { peers, options } = bench;
  say();
  say(
    `## The floor of a paid call: the parts it cannot do without, one at a time, in CPU per operation on core ${SERVER_CORE}`,
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
  try {
    progress('floor: the parts');
    const figures = await child.call<FloorFigures>(
      'measure',
      { targetUrl: peers.routes.free, rpcUrl: peers.rpcUrl, databaseUrl: service.databaseUrl, count },
      600_000,
    );
    progress('floor: an inbound request through express 5');
    const configUrl = `${announcedUrl(express)}/config`;
    await child.call('send', { url: configUrl, count: Math.ceil(count / 4) }, 600_000);
    const before = cpuMs(express.pid);
    await child.call('send', { url: configUrl, count }, 600_000);
    const after = cpuMs(express.pid);
    const inboundUs = before === undefined || after === undefined ? NaN : ((after - before) * 1000) / count;
    const all = { ...figures, inboundUs };
    const us = (value: number) => fmt.rps(value);
    say(`  an inbound request answered by plain express 5 (server side)     ${us(inboundUs)} us`);
    say(`  an outbound keep-alive HTTP exchange (node:http, client side)    ${us(figures.httpClientUs)} us`);
    say(`  a JSON-RPC call through our transport (eth_blockNumber)          ${us(figures.rpcUs)} us`);
    say(`  four JSON-RPC calls made together (one batch)                    ${us(figures.rpcBatchOfFourUs)} us`);
    say(`  a Postgres round trip (pg, select 1)                             ${us(figures.postgresUs)} us`);
    say(`  viem's ECDSA recovery (recoverAddress, secp256k1 in JavaScript)  ${us(figures.recoverUs)} us`);
    say(`  viem's signature of a digest (our account's sign)                ${us(figures.signUs)} us`);
    say(`  Postgres's CPU (its backend): a committed one-row insert        ${us(figures.postgresCommitUs)} us`);
    say(`  Postgres's CPU: each further row that transaction inserts       ${us(figures.postgresRowUs)} us`);
    say(`  Postgres's CPU: each further row it updates (a counter)         ${us(figures.postgresUpdateUs)} us`);
    const line = (name: string, path: Path) => {
      const parts = [
        path.inbound > 0 ? `${path.inbound} inbound` : '',
        path.outbound > 0 ? `${path.outbound} outbound` : '',
        path.rpc > 0 ? `${path.rpc} JSON-RPC` : '',
        path.rpcBatches > 0 ? `${path.rpcBatches} batch of four JSON-RPC` : '',
        path.statements > 0 ? `${path.statements} statements` : '',
        path.recoveries > 0 ? `${path.recoveries} recovery` : '',
        path.signatures > 0 ? `${path.signatures} signature` : '',
      ].filter(Boolean);
      return `  ${name}: ${parts.join(' + ')} = ${us(floorUs(path, all))} us at the least`;
    };
    say(line('paid /proxy', PATHS.proxy));
    say(line('paid /relay', PATHS.relay));
    say(line('one inbound verification', PATHS.verification));
    const database = (name: string, path: Path) =>
      `  ${name}, Postgres's CPU: ${path.commits} committed writes + ${path.furtherInserts} rows inserted + ${path.furtherUpdates} updated = ` +
      `${us(postgresFloorUs(path, figures))} us at the least (goal ${us(PAID_DB_CPU_BUDGET_US)} us)`;
    if (Number.isFinite(figures.postgresCommitUs)) {
      say(database('paid /proxy', PATHS.proxy));
      say(database('paid /relay', PATHS.relay));
    } else {
      say("  Postgres's own CPU was not measured: its backend is not a process of this machine");
    }
    const verification = floorUs(PATHS.verification, all);
    say(
      `  so one core verifies at most ${fmt.rps(1e6 / verification)} payments a second (the recovery alone: ${fmt.rps(1e6 / figures.recoverUs)})`,
    );
    bench.results.floor = {
      ...all,
      proxyUs: floorUs(PATHS.proxy, all),
      relayUs: floorUs(PATHS.relay, all),
      proxyPostgresUs: postgresFloorUs(PATHS.proxy, figures),
      relayPostgresUs: postgresFloorUs(PATHS.relay, figures),
      verificationUs: verification,
      paths: PATHS,
    };
  } finally {
    await Promise.all([child.stop(), express.stop()]);
  }
}
