/**
 * Bench child: what the parts a paid call cannot do without cost on this machine, one at a time,
 * in CPU of this process per operation (user + system, every thread): a keep-alive HTTP exchange
 * as a client (node:http, as our outbound client and RPC transport use it), a Postgres round trip
 * (pg's `select 1`), a JSON-RPC call through our transport (eth_blockNumber) and four made
 * together (one batch), an ECDSA recovery of a signer (recoverSigner, what checking a client's
 * EIP-3009 signature costs) and a signature of a digest (our account's sign, what paying a target
 * costs), both through the secp256k1 the service chooses (payments/basics/secp256k1.ts). On the Postgres side it
 * measures the server's CPU for a committed write and for each further row of it. It also sends
 * requests to an inbound server the bench measures (the server's own CPU per request).
 *
 * Each part is measured back to back and, with `gapMs`, one operation every `gapMs` as a paid call
 * makes them: a part runs once or twice a call, and between two of them the core has waited on the
 * target and the chain or done the rest of the call. Run so, its code and data are no longer in
 * the caches, and it costs two to three times as much (a committed one-row insert here: 0.22 ms
 * back to back, 0.68 ms one every 40 ms). The cost of waking up for an operation (an empty one,
 * paced alike) is taken off the client side's figures; Postgres's backend only wakes for the work.
 *
 * Calls from the bench: measure {targetUrl, rpcUrl, databaseUrl, count, gapMs} and send {url, count, gapMs}.
 * Run built (bundled by the bench, dependencies from node_modules) so that viem's imports cost
 * what they cost in production.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createPublicClient, type Hex } from 'viem';
import { generatePrivateKey } from 'viem/accounts';
import { serviceAccount } from '../../payments/chains/evm/account';
import { rpcTransport } from '../../payments/chains/evm/transport';
import { processSecp256k1, recoverSigner, type Secp256k1Name } from '../../payments/basics/secp256k1';
import { cpuMs, serveChild } from './children';
import { median } from './stats';

export interface FloorFigures {
  /** CPU microseconds per operation of this process. */
  httpClientUs: number;
  postgresUs: number;
  rpcUs: number;
  /** Four JSON-RPC calls made together: one batch, as a verification's reads go. */
  rpcBatchOfFourUs: number;
  recoverUs: number;
  signUs: number;
  /** The secp256k1 implementation the recovery and the signature went through, as the service's would. */
  secp256k1: Secp256k1Name;
  /**
   * Postgres's own CPU (its backend's, read from /proc; NaN when the server is not on this
   * machine): a committed transaction inserting one row, and each further row it inserts by a
   * statement of its own (as our database functions write their rows: plpgsql, plans cached).
   */
  postgresCommitUs: number;
  postgresRowUs: number;
  /** Each further row of it updated (a row every call updates, as a balance or a counter). */
  postgresUpdateUs: number;
  /**
   * Wall time per operation (median, microseconds): what waiting for it adds to a call. The
   * committed write is its round trip from the client, the server's flush of its commit included.
   */
  wallUs: {
    httpClient: number;
    postgres: number;
    rpc: number;
    rpcBatchOfFour: number;
    recover: number;
    sign: number;
    postgresCommit: number;
  };
}

interface Measured {
  cpuUs: number;
  /** Median wall time of one operation, the wait before it left out. */
  wallUs: number;
}

/** Runs `operation` once, adding its wall time in microseconds to `walls`. */
async function timed(walls: number[], operation: () => Promise<unknown>): Promise<void> {
  const start = performance.now();
  await operation();
  walls.push((performance.now() - start) * 1000);
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function get(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { agent }, (response) => {
      response.on('data', () => {});
      response.on('end', () => resolve());
      response.on('error', reject);
    });
    request.on('error', reject);
  });
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * CPU microseconds per call of `operation`, and its median wall time, run `count` times after a
 * warm-up: one after another, or one every `gapMs` (then less the CPU that waking up for an empty
 * operation costs).
 */
async function perOperation(
  count: number,
  gapMs: number,
  operation: (index: number) => Promise<unknown>,
): Promise<Measured> {
  const run = async (work: (index: number) => Promise<unknown>): Promise<Measured> => {
    for (let index = 0; index < Math.ceil(count / 4); index += 1) await work(index);
    const walls: number[] = [];
    const before = process.cpuUsage();
    for (let index = 0; index < count; index += 1) {
      if (gapMs > 0) await pause(gapMs);
      await timed(walls, () => work(index));
    }
    const used = process.cpuUsage(before);
    return { cpuUs: (used.user + used.system) / count, wallUs: median(walls) };
  };
  if (gapMs === 0) return run(operation);
  const wake = await run(() => Promise.resolve());
  const measured = await run(operation);
  return { ...measured, cpuUs: Math.max(0, measured.cpuUs - wake.cpuUs) };
}

async function measure(message: {
  targetUrl: string;
  rpcUrl: string;
  databaseUrl: string;
  count: number;
  gapMs: number;
}): Promise<FloorFigures> {
  const { count, gapMs } = message;
  const httpClient = await perOperation(count, gapMs, () => get(message.targetUrl));

  const client = new pg.Client({ connectionString: message.databaseUrl });
  await client.connect();
  let postgres: Measured;
  try {
    postgres = await perOperation(count, gapMs, () => client.query('select 1'));
  } finally {
    await client.end();
  }

  const server = await postgresServer(message.databaseUrl, count, gapMs);

  const rpcClient = createPublicClient({
    transport: rpcTransport(message.rpcUrl, { timeout: 10_000, network: 'base-sepolia' }),
  });
  const rpc = await perOperation(count, gapMs, () => rpcClient.request({ method: 'eth_blockNumber' }));
  const rpcBatchOfFour = await perOperation(count, gapMs, () =>
    Promise.all([
      rpcClient.request({ method: 'eth_blockNumber' }),
      rpcClient.request({ method: 'eth_chainId' }),
      rpcClient.request({ method: 'eth_gasPrice' }),
      rpcClient.request({ method: 'eth_blockNumber' }),
    ]),
  );

  const account = serviceAccount(generatePrivateKey());
  const hashes = Array.from({ length: count }, (): Hex => `0x${randomBytes(32).toString('hex')}`);
  const at = <T>(list: readonly T[], index: number): T => {
    const item = list[index % list.length];
    if (item === undefined) throw new Error('nothing to measure');
    return item;
  };
  const signatures: Hex[] = [];
  const sign = await perOperation(count, gapMs, async (index) => {
    signatures[index % count] = await account.sign({ hash: at(hashes, index) });
  });
  const recover = await perOperation(count, gapMs, (index) => {
    const recovered = recoverSigner(at(hashes, index), at(signatures, index));
    if (recovered !== account.address) throw new Error('recovered another address');
    return Promise.resolve();
  });
  return {
    httpClientUs: httpClient.cpuUs,
    postgresUs: postgres.cpuUs,
    rpcUs: rpc.cpuUs,
    rpcBatchOfFourUs: rpcBatchOfFour.cpuUs,
    recoverUs: recover.cpuUs,
    signUs: sign.cpuUs,
    secp256k1: processSecp256k1().implementation.name,
    postgresCommitUs: server.postgresCommitUs,
    postgresRowUs: server.postgresRowUs,
    postgresUpdateUs: server.postgresUpdateUs,
    wallUs: {
      httpClient: httpClient.wallUs,
      postgres: postgres.wallUs,
      rpc: rpc.wallUs,
      rpcBatchOfFour: rpcBatchOfFour.wallUs,
      recover: recover.wallUs,
      sign: sign.wallUs,
      postgresCommit: server.commitWallUs,
    },
  };
}

/** How many tables the rows of one transaction go to (the proxy's hold writes seven rows). */
const FLOOR_TABLES = 8;

/**
 * The server's CPU per committed write: a plpgsql function, called in its own transaction, that
 * inserts a row into each of its first `inserts` tables and updates one row (the same row on every
 * call, as a balance or a daily counter is) in each of the next `updates` tables. Each table has a
 * primary key and a unique index, as our records have at the least. Measured with one insert
 * (the commit), eight inserts, and one insert and seven updates. Tables and function are this
 * run's, dropped after.
 */
async function postgresServer(
  databaseUrl: string,
  count: number,
  gapMs: number,
): Promise<{ postgresCommitUs: number; postgresRowUs: number; postgresUpdateUs: number; commitWallUs: number }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const suffix = `${process.pid}_${randomBytes(3).toString('hex')}`;
  const tables = Array.from({ length: FLOOR_TABLES }, (_, index) => `floor_rows_${index}_${suffix}`);
  const write = `floor_write_${suffix}`;
  try {
    const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
    const pid = rows[0]?.pid;
    for (const name of tables) {
      await client.query(
        `create table ${name} (id bigserial primary key, reference text not null unique, amount bigint not null default 1, created_at timestamptz not null default now())`,
      );
      await client.query(`insert into ${name} (reference) values ('the updated row')`);
    }
    const statements = tables.map(
      (name, index) =>
        `if p_inserts > ${index} then insert into ${name} (reference) values (p_reference || '/${index}'); ` +
        `elsif p_inserts + p_updates > ${index} then update ${name} set amount = amount + 1 where id = 1; end if;`,
    );
    await client.query(
      `create function ${write}(p_inserts int, p_updates int, p_reference text) returns void language plpgsql as $fn$ begin ${statements.join(' ')} end $fn$`,
    );
    let serial = 0;
    const perCall = async (inserts: number, updates: number): Promise<Measured> => {
      const once = () => client.query(`select ${write}($1, $2, $3)`, [inserts, updates, `r${(serial += 1)}`]);
      for (let index = 0; index < Math.ceil(count / 4); index += 1) await once();
      const walls: number[] = [];
      const before = pid === undefined ? undefined : cpuMs(pid);
      for (let index = 0; index < count; index += 1) {
        if (gapMs > 0) await pause(gapMs);
        await timed(walls, once);
      }
      const after = pid === undefined ? undefined : cpuMs(pid);
      const cpuUs = before === undefined || after === undefined ? NaN : ((after - before) * 1000) / count;
      return { cpuUs, wallUs: median(walls) };
    };
    const committed = await perCall(1, 0);
    const inserted = await perCall(FLOOR_TABLES, 0);
    const updated = await perCall(1, FLOOR_TABLES - 1);
    return {
      postgresCommitUs: committed.cpuUs,
      // Differences of two noisy figures: a row never costs less than nothing.
      postgresRowUs: Math.max(0, (inserted.cpuUs - committed.cpuUs) / (FLOOR_TABLES - 1)),
      postgresUpdateUs: Math.max(0, (updated.cpuUs - committed.cpuUs) / (FLOOR_TABLES - 1)),
      commitWallUs: committed.wallUs,
    };
  } finally {
    await client.query(`drop function if exists ${write}(int, int, text)`).catch(() => undefined);
    for (const name of tables) await client.query(`drop table if exists ${name}`).catch(() => undefined);
    await client.end();
  }
}

/** Sends `count` requests to `url` (one every `gapMs`); the median wall time of one, in microseconds. */
async function send(message: { url: string; count: number; gapMs: number }): Promise<{ sent: number; wallUs: number }> {
  const walls: number[] = [];
  for (let index = 0; index < message.count; index += 1) {
    if (message.gapMs > 0) await pause(message.gapMs);
    await timed(walls, () => get(message.url));
  }
  return { sent: message.count, wallUs: median(walls) };
}

serveChild({ measure, send });
