/** The setup every section shares: the local peers, the load generator, the services, the bindings of the requests. */
import pg from 'pg';
import type { AutocannonRun, LoadRequest } from '../autocannon';
import type { LoadResult } from '../caps';
import type { Child } from '../children';
import type { Bindings } from '../scenarios';
import type { ServiceChild } from '../serviceChild';
import type { Options } from './options';
import type { Goal } from './output';

export interface PeersInfo {
  network: string;
  rpcUrl: string;
  facilitatorUrl: string;
  targetUrl: string;
  routes: Record<string, string>;
  /** The version 2 target (@x402/express 2.27) on the same network, and its routes. */
  v2TargetUrl: string;
  v2Routes: Record<string, string>;
  /** The price of the target's /paid route in micro-USDC (a decimal string). */
  priceMicroUsdc: string;
  serviceEvmPrivateKey: `0x${string}`;
  clientEvmPrivateKey: `0x${string}`;
}

export const BASE_SEPOLIA_CHAIN_ID = 84532;

/** Runs one statement (create or drop a database) on the Postgres server of `serverUrl`, through its postgres database. */
export async function onServer(serverUrl: string, statement: string): Promise<void> {
  const admin = new URL(serverUrl);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

export async function throwawayDatabase(name: string): Promise<{ url: string; drop: () => Promise<void> } | undefined> {
  const serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) return undefined;
  const run = (statement: string) => onServer(serverUrl, statement);
  await run(`create database "${name}"`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => run(`drop database if exists "${name}" with (force)`) };
}

export interface Bench {
  options: Options;
  dataDir: string;
  /** The first service started the embedded Postgres (its descendants): their CPU is reported. */
  embeddedDatabase: boolean;
  /** Set once the first service has started its database: the others use that one. */
  sharedDatabaseUrl: string | undefined;
  peers: PeersInfo;
  peersChild: Child;
  loadgen: Child;
  bindings: Bindings;
  goals: Goal[];
  results: Record<string, unknown>;
  startService(
    name: string,
    overrides?: Record<string, string>,
    nodeFlags?: string[],
    built?: boolean,
  ): Promise<ServiceChild>;
  stopService(service: ServiceChild): Promise<void>;
  /** autocannon from the load generator: options.connections for options.durationS unless given. */
  autocannon(
    baseUrl: string,
    request: LoadRequest,
    extra?: Partial<AutocannonRun> & { check429?: { limit: number } },
  ): Promise<LoadResult>;
}
