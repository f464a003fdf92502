/**
 * Starts and stops one instance: database (DATABASE_URL or embedded), migrations, the worker
 * (unless RUN_WORKER=false), and the HTTP API, or for `npm run worker` the probes on WORKER_PORT.
 * Each instance owns its metrics and its probes. Used by `npm start`, `npm run worker` and tests.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { sql } from 'kysely';
import type { Logger } from 'pino';
import { createDb, migrateToLatest, type Db, type DbHandle } from '../db/index';
import { listenTo } from '../db/notify';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../db/embedded';
import { handlers as defaultHandlers } from '../handlers/index';
import { errorReply, type ErrorCode } from '../handlers/errors';
import type { HandlerMap } from '../handlers/types';
import { API_KEY_CHANGES_CHANNEL, ApiKeyCache } from '../payments/accounts/accounts';
import { systemClock, type Clock } from '../payments/basics/clock';
import type { Deps } from '../payments/deps';
import { selectSecp256k1 } from '../payments/basics/secp256k1';
import type { HandlerDeps } from '../handlers/deps';
import { createChains } from '../payments/chains/index';
import { checkRpcReachable } from '../payments/chains/registry';
import { checkChainIdentity, requireChainIdentity } from '../payments/chains/identity';
import { systemResolver, TargetConnections, type Resolver } from '../payments/basics/http/index';
import { advisoryKeyLock, SubmissionQueue } from '../payments/chains/submissions';
import { DEFAULT_PAYMENT_BOUNDS } from '../payments/basics/paymentBounds';
import { openUptoExposure } from '../payments/accounts/limits';
import { renewIdempotencyLeases } from '../payments/basics/idempotency';
import { WalletBalances } from '../payments/chains/balances';
import { ConfigError, type Config } from '../payments/basics/config';
import { startWorker, type WorkerHandle } from '../worker/runner';
import { queueFloatRefresh } from '../payments/tracking/float';
import { createApp } from './app';
import { operatingSource } from './operating';
import { ConcurrencyCaps } from './caps';
import { renderDocsPage } from './docsPage';
import { loadConsolePage } from './consolePage';
import { createLogger } from './logger';
import { checkFacilitatorCredentials } from './facilitatorCheck';
import { ServiceMetrics } from './metrics';
import { loadDocument, warmValidators } from './openapi';
import { createProbes, serveProbes, type Probes } from './probes';

export interface ServiceOptions {
  logger?: Logger;
  /** Resolution of target host names for the SSRF guard; the system resolver by default. */
  resolver?: Resolver;
  clock?: Clock;
  handlers?: HandlerMap;
  /** Serve HTTP (false for `npm run worker`). */
  serveHttp?: boolean;
  /** The event-loop delay over which GET /health/live answers 503 (DEFAULT_LIVE_MAX_DELAY_MS). */
  liveMaxEventLoopDelayMs?: number;
  /**
   * Work that needs the listening URL and must be done before the instance says it is ready (the
   * sandbox's demo organisation and sandbox.json): until it has finished, GET /health and GET
   * /health/ready answer 503 with the check `name` failing. A failure stops the start.
   */
  beforeReady?: { name: string; run(url: string, db: Db): Promise<unknown> };
}

export interface Service {
  url: string;
  config: Config;
  databaseUrl: string;
  dbHandle: DbHandle;
  deps: HandlerDeps;
  caps: ConcurrencyCaps;
  worker: WorkerHandle | undefined;
  server: Server | undefined;
  metrics: ServiceMetrics;
  /** Where `npm run worker` serves its probes and metrics (WORKER_PORT), when it does. */
  probeUrl: string | undefined;
  stop(): Promise<void>;
}

async function openDatabase(config: Config, log: Logger): Promise<{ url: string; embedded?: EmbeddedDatabase }> {
  if (config.databaseUrl) return { url: config.databaseUrl };
  log.info({ dataDir: config.dataDir }, 'DATABASE_URL is not set: starting the embedded Postgres');
  const embedded = await startEmbeddedPostgres({
    dataDir: config.dataDir,
    log: (message) => log.debug({ component: 'postgres' }, message),
    warn: (message) => log.warn({ component: 'postgres' }, message),
  });
  return { url: embedded.url, embedded };
}

export async function startService(config: Config, options: ServiceOptions = {}): Promise<Service> {
  const log = options.logger ?? createLogger(config.logLevel, config.logFormat);
  // Chosen once, before anything signs or recovers (payments/basics/secp256k1.ts).
  const secp256k1 = selectSecp256k1(config.secp256k1Implementation);
  log.info(
    { secp256k1: secp256k1.implementation.name, passedOver: secp256k1.passedOver },
    `secp256k1: ${secp256k1.implementation.name}`,
  );
  await checkChainIdentities(config, log);
  await checkFacilitatorCredentials(config, log);
  const { url: databaseUrl, embedded } = await openDatabase(config, log);
  const dbHandle = createDb(databaseUrl, {
    maxConnections: config.databasePoolMax,
    onPoolError: (error) => log.error({ err: error }, 'database pool error'),
  });
  const cleanups: Array<() => Promise<void>> = [];
  try {
    const applied = await migrateToLatest(dbHandle.db);
    if (applied.length > 0) log.info({ migrations: applied }, 'database migrated');
    const caps = new ConcurrencyCaps({ relay: config.capRelay, proxy: config.capProxy, webhooks: config.capWebhooks });
    const metrics = new ServiceMetrics(options.serveHttp === false ? undefined : caps, () =>
      openUptoExposure(dbHandle.db),
    );
    metrics.watchOperations(operatingSource(dbHandle.db, config));
    const chains = await createChains(config, { onRpc: metrics.rpc, rpcTimeoutMs: config.rpcTimeoutMs });
    cleanups.push(() => chains.close());
    const connections = new TargetConnections();
    // Idle connections to targets close at stop rather than after their idle time.
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          connections.close();
          resolve();
        }),
    );
    const apiKeyCache = new ApiKeyCache(config.apiKeyCacheMs);
    const stopListening = listenForKeyChanges(config, databaseUrl, apiKeyCache, log, options);
    if (stopListening) cleanups.push(stopListening);

    const running: Running = { worker: undefined, url: '', settingUp: options.beforeReady !== undefined };
    const probes = instanceProbes(config, dbHandle, chains, running, options);
    metrics.watchReadiness(() => probes.ready());
    cleanups.push(async () => {
      probes.stop();
      await Promise.resolve();
    });
    const deps = assembleDeps({
      config,
      dbHandle,
      chains,
      connections,
      apiKeyCache,
      caps,
      log,
      options,
      running,
      probes,
      metrics,
    });
    const stopRenewing = renewLeases(deps, log);
    cleanups.push(async () => {
      stopRenewing();
      await Promise.resolve();
    });

    if (config.runWorker) {
      const started = await startWorker(databaseUrl, deps, {
        onJob: (task, outcome) => metrics.job(task, outcome),
        onPaymentLost: (leg, network) => metrics.paymentLost(leg, network),
      });
      running.worker = started;
      cleanups.push(() => started.stop());
      // The float is read at once, then every FLOAT_REFRESH_SECONDS (payments/tracking/float.ts).
      await queueFloatRefresh(dbHandle.db, 0);
    }

    let server: Server | undefined;
    let probeUrl: string | undefined;
    if (options.serveHttp !== false) {
      ({ server, url: running.url } = await serveHttp(
        config,
        deps,
        options.handlers ?? defaultHandlers,
        caps,
        log,
        metrics,
      ));
    } else if (config.workerPort !== undefined) {
      const served = await serveProbes({
        port: config.workerPort,
        host: config.host,
        probes,
        metrics: () => metrics.exposition(),
        log,
      });
      probeUrl = served.url;
      // Closed first at stop (cleanups run in reverse): the process is going away.
      cleanups.push(
        () =>
          new Promise<void>((resolve) => {
            served.server.close(() => resolve());
            served.server.closeAllConnections();
          }),
      );
    }

    if (options.beforeReady) {
      await options.beforeReady.run(running.url, dbHandle.db);
      running.settingUp = false;
    }
    probes.started();
    let stopping: Promise<void> | undefined;
    const stop = () => {
      stopping ??= (async () => {
        if (server) await closeGracefully(server, config.shutdownGraceMs, log);
        for (const cleanup of cleanups.reverse()) await cleanup();
        await dbHandle.close();
        if (embedded) await embedded.stop();
        log.info('stopped');
      })();
      return stopping;
    };
    return {
      url: running.url,
      config,
      databaseUrl,
      dbHandle,
      deps,
      caps,
      worker: running.worker,
      server,
      metrics,
      probeUrl,
      stop,
    };
  } catch (error) {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await dbHandle.close();
    if (embedded) await embedded.stop();
    throw error;
  }
}

/** The longest the start waits for an RPC's chain id or genesis hash (RPC_TIMEOUT_MS when shorter). */
const START_IDENTITY_TIMEOUT_MS = 5_000;

/**
 * Before anything starts, every enabled network's RPC is asked which chain it serves: another
 * chain than the network's throws the ConfigError that names the variable (the URL shown without
 * its secrets). An RPC that does not answer does not stop the start: readiness reports it.
 */
async function checkChainIdentities(config: Config, log: Logger): Promise<void> {
  const chains = await createChains(config, { rpcTimeoutMs: config.rpcTimeoutMs });
  try {
    const timeoutMs = Math.min(config.rpcTimeoutMs, START_IDENTITY_TIMEOUT_MS);
    const checked = await Promise.all(
      config.networks.map(async (settings) => ({
        network: settings.name,
        check: await checkChainIdentity(chains, settings, timeoutMs),
      })),
    );
    for (const { network, check } of checked) {
      if (check.kind === 'unreachable')
        log.warn({ network, reason: check.reason }, `the RPC of ${network} did not say which chain it serves`);
    }
    const other = checked.find(({ check }) => check.kind === 'other')?.check;
    if (other?.kind === 'other') throw new ConfigError(other.variable, other.message);
  } finally {
    await chains.close();
  }
}

/** An RPC endpoint that does not answer this fast makes the instance not ready. */
const READY_RPC_TIMEOUT_MS = 1_500;

/**
 * The probes of this process: the database, the worker when this process runs one, and the RPC of
 * every enabled network.
 */
function instanceProbes(
  config: Config,
  dbHandle: DbHandle,
  chains: Deps['chains'],
  running: Running,
  options: ServiceOptions,
): Probes {
  return createProbes({
    ...(options.liveMaxEventLoopDelayMs === undefined ? {} : { liveMaxDelayMs: options.liveMaxEventLoopDelayMs }),
    readiness: () => {
      const checks: Record<string, () => Promise<void>> = {
        database: async () => {
          await sql`select 1`.execute(dbHandle.db);
        },
      };
      const { worker } = running;
      if (worker) {
        checks.worker = () =>
          worker.isRunning() ? Promise.resolve() : Promise.reject(new Error('the job worker has stopped'));
      }
      for (const network of config.networks) {
        // Answering is not enough: the RPC must serve the network's chain.
        checks[`rpc:${network.name}`] = async () => {
          await Promise.all([
            checkRpcReachable(chains, network.name, READY_RPC_TIMEOUT_MS),
            requireChainIdentity(chains, network, READY_RPC_TIMEOUT_MS),
          ]);
        };
      }
      if (options.beforeReady) checks[options.beforeReady.name] = () => setUpCheck(running);
      return checks;
    },
  });
}

/**
 * What is known only once started: the in-process worker, the URL the API listens on, and the
 * check that fails while the start's last step (ServiceOptions.beforeReady) runs.
 */
interface Running {
  worker: WorkerHandle | undefined;
  url: string;
  settingUp: boolean;
}

/** The check of ServiceOptions.beforeReady: failing while it runs. */
function setUpCheck(running: Running): Promise<void> {
  return running.settingUp ? Promise.reject(new Error('still being set up')) : Promise.resolve();
}

/**
 * Valid keys stay in memory only while changes to keys are being announced to this process:
 * without the listener the cache never serves a key. Answers how to stop listening, when listening.
 */
function listenForKeyChanges(
  config: Config,
  databaseUrl: string,
  apiKeyCache: ApiKeyCache,
  log: Logger,
  options: ServiceOptions,
): (() => Promise<void>) | undefined {
  if (config.apiKeyCacheMs <= 0 || options.serveHttp === false) return undefined;
  const listener = listenTo(databaseUrl, API_KEY_CHANGES_CHANNEL, {
    onNotify: (prefix) => apiKeyCache.changed(prefix),
    onState: (listening) => {
      apiKeyCache.setListening(listening);
      if (!listening)
        log.warn('not receiving API key changes: every key is read from the database until they arrive again');
    },
    onError: (error) => log.warn({ err: error }, 'the connection that receives API key changes failed; reconnecting'),
  });
  return () => listener.stop();
}

/**
 * Renews, every third of IDEMPOTENCY_LEASE_MS, the lease of each paid call this process runs, so a
 * repeat can tell a call still running from one whose process died. Answers how to stop.
 */
function renewLeases(deps: Pick<Deps, 'db' | 'idempotencyOwner'>, log: Logger): () => void {
  let renewing = false;
  const timer = setInterval(
    () => {
      if (renewing) return;
      renewing = true;
      renewIdempotencyLeases(deps.db, deps.idempotencyOwner)
        .catch((error: unknown) => log.warn({ err: error }, 'the leases of running paid calls could not be renewed'))
        .finally(() => {
          renewing = false;
        });
    },
    Math.max(100, Math.floor(deps.idempotencyOwner.leaseMs / 3)),
  );
  timer.unref();
  return () => clearInterval(timer);
}

/** The one dependency object of this process: handlers and jobs share every member. */
function assembleDeps({
  config,
  dbHandle,
  chains,
  connections,
  apiKeyCache,
  caps,
  log,
  options,
  running,
  probes,
  metrics,
}: {
  config: Config;
  dbHandle: DbHandle;
  chains: Deps['chains'];
  connections: TargetConnections;
  apiKeyCache: ApiKeyCache;
  caps: ConcurrencyCaps;
  log: Logger;
  options: ServiceOptions;
  running: Running;
  probes: Probes;
  metrics: ServiceMetrics;
}): HandlerDeps {
  const document = loadDocument();
  return {
    db: dbHandle.db,
    config,
    chains,
    submissions: new SubmissionQueue(advisoryKeyLock(dbHandle.db)),
    resolver: options.resolver ?? systemResolver,
    clock: options.clock ?? systemClock,
    log,
    connections,
    balances: new WalletBalances(),
    paymentBounds: {
      ...DEFAULT_PAYMENT_BOUNDS,
      rpcTimeoutMs: config.rpcTimeoutMs,
      // ASYNC_THRESHOLD_MS: how long a request waits for a confirmation before the watch goes on in a job.
      confirmationTimeoutMs: config.asyncThresholdMs,
    },
    apiKeyCache,
    idempotencyOwner: { instanceId: randomUUID(), leaseMs: config.idempotencyLeaseMs },
    onUptoChargeLost: (network) => metrics.uptoChargeLost(network),
    onUptoRefused: (reason) => metrics.uptoRefused(reason),
    onFacilitatorRefusedCredentials: (path, status) => metrics.facilitatorRefusedCredentials(path, status),
    capMetrics: () => caps.metrics(),
    healthChecks: {
      database: async () => {
        await sql`select 1`.execute(dbHandle.db);
      },
      worker: async () => {
        if (running.worker) {
          if (!running.worker.isRunning()) throw new Error('the in-process worker has stopped');
          return;
        }
        // Workers run in other processes (RUN_WORKER=false): their schema must be in place.
        await sql`select 1 from graphile_worker.migrations limit 1`.execute(dbHandle.db);
      },
      ...(options.beforeReady && { [options.beforeReady.name]: () => setUpCheck(running) }),
    },
    probes,
    metricsExposition: () => metrics.exposition(),
    document,
    docsHtml: renderDocsPage(document),
    consolePage: loadConsolePage(),
    baseUrl: () => config.publicBaseUrl ?? running.url,
  };
}

/** The HTTP server with its timeouts, listening; parser refusals answered in the service's own JSON. */
async function serveHttp(
  config: Config,
  deps: HandlerDeps,
  handlers: HandlerMap,
  caps: ConcurrencyCaps,
  log: Logger,
  metrics: ServiceMetrics,
): Promise<{ server: Server; url: string }> {
  const { express, api } = await createApp({ deps, handlers, caps, logger: log, metrics });
  const server = createServer(
    {
      requestTimeout: config.requestTimeoutMs,
      // Node requires headersTimeout <= requestTimeout.
      headersTimeout: Math.min(config.headersTimeoutMs, config.requestTimeoutMs),
      keepAliveTimeout: config.keepAliveTimeoutMs,
    },
    express,
  );
  server.on('clientError', (error: Error, socket: Duplex) => answerClientError(error, socket, log));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  log.info({ url }, 'listening');
  void warmValidators(api).catch((error: unknown) => {
    log.warn({ err: error }, 'compiling the request validators ahead failed; each compiles on first use');
  });
  return { server, url };
}

/** Node's parser error codes that have an error code of ours; any other is malformed_request. */
const CLIENT_ERRORS: Record<string, { code: ErrorCode; details: string }> = {
  HPE_HEADER_OVERFLOW: {
    code: 'header_fields_too_large',
    details: "The request's header section exceeds the size this server reads; the connection is closed.",
  },
  HPE_CHUNK_EXTENSIONS_OVERFLOW: {
    code: 'payload_too_large',
    details: 'The chunk extensions of the request body are too large; the connection is closed.',
  },
  ERR_HTTP_REQUEST_TIMEOUT: {
    code: 'request_timeout',
    details: 'The request was not received in time; the connection is closed.',
  },
};

/**
 * Requests Node's HTTP parser refuses never reach express; Node would answer them with a bare
 * status line. They get the service's {code, error, details} JSON instead, as a complete HTTP/1.1
 * response written to the socket, which is then closed (the parser cannot resume after an error).
 * The codes and statuses are Node's own (HPE_HEADER_OVERFLOW 431, request timeout 408, 400 for
 * any other parse error).
 */
export function answerClientError(
  error: Error & { code?: string; reason?: string },
  socket: Duplex,
  log: Logger,
): void {
  // A reset connection has nobody left to read an answer.
  if (error.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  // A response of an earlier request on this connection is under way: bytes of ours would corrupt it.
  const inFlight = (socket as Duplex & { _httpMessage?: unknown })._httpMessage;
  if (!socket.writable || inFlight) {
    socket.destroy();
    return;
  }
  const known = error.code ? CLIENT_ERRORS[error.code] : undefined;
  const answer = errorReply(
    known?.code ?? 'malformed_request',
    known?.details ??
      `The request is not valid HTTP/1.1 (${error.reason ?? error.code ?? 'parse error'}); the connection is closed.`,
  );
  const requestId = randomUUID();
  log.info({ requestId, code: error.code, status: answer.status }, 'request refused by the HTTP parser');
  const body = JSON.stringify(answer.body);
  socket.end(
    `HTTP/1.1 ${answer.status} ${answer.body.error}\r\n` +
      'content-type: application/json; charset=utf-8\r\n' +
      `content-length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId}\r\n` +
      'connection: close\r\n' +
      '\r\n' +
      body,
  );
}

/** Stops accepting, lets in-flight requests finish within the grace period, then cuts the rest. */
async function closeGracefully(server: Server, graceMs: number, log: Logger): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'expired'>((resolve) => {
    timer = setTimeout(() => resolve('expired'), graceMs);
  });
  const outcome = await Promise.race([closed.then(() => 'closed' as const), expired]);
  clearTimeout(timer);
  if (outcome === 'expired') {
    log.warn({ graceMs }, 'in-flight requests did not finish within the grace period; closing their connections');
    server.closeAllConnections();
    await closed;
  }
}
