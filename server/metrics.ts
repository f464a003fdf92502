/**
 * Prometheus metrics of one service instance (GET /metrics, and WORKER_PORT's /metrics for
 * `npm run worker`). Each instance owns its registry: prom-client's global default registry is
 * never used, so several services in one process (the tests) never share or clash on a metric.
 *
 * Every label takes its values from a small closed set: operationIds of the document, HTTP
 * statuses, cap groups, modes and results, task names of the worker, network names of the table,
 * JSON-RPC method names our code calls. No URL, address, key or id is ever a label.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RpcObserver } from '../payments/chains/index';
import type { FinalityLeg } from '../db/schema';
import { NETWORK_NAMES } from '../payments/basics/networkTable';
import { processSecp256k1, SECP256K1_IMPLEMENTATIONS } from '../payments/basics/secp256k1';
import type { CapGroup, CapMetric, ConcurrencyCaps } from './caps';
import { EVENT_LOOP_SAMPLE_MS } from './probes';

/** What the operating gauges show, read once per scrape (server/operating.ts builds it). */
export interface OperatingFigures {
  networks: Array<{
    network: string;
    floatMicroUsdc?: number;
    floatFloorMicroUsdc?: number;
    gasAtomic?: number;
    gasFloorAtomic?: number;
    readAtSeconds?: number;
    floatBelow?: boolean;
    gasBelow?: boolean;
    channelMicroUsdc?: number;
    refundsOwedMicroUsdc?: number;
    /** Unix seconds of the nearest end of a payer's withdrawal delay on a channel we receive on with unclaimed charges. */
    claimDeadlineSeconds?: number;
  }>;
  stuck: Record<string, number>;
}

export interface OperatingSource {
  read(): Promise<OperatingFigures>;
}

export const CAP_GROUPS: readonly CapGroup[] = ['proxy', 'relay', 'webhooks'];

const FINALITY_LEGS: readonly FinalityLeg[] = ['client_settlement', 'target_payment', 'refund'];

export type UptoRefusalReason = 'payer_defaulted' | 'wallet_exposure' | 'total_exposure';
const UPTO_REFUSAL_REASONS: readonly UptoRefusalReason[] = ['payer_defaulted', 'wallet_exposure', 'total_exposure'];

export type PaidCallMode = 'proxy' | 'relay' | 'chat';
export type PaidCallResult = 'paid' | 'refunded' | 'failed' | 'pending';
/** success: the job ended well; error: an attempt failed (it is retried); failed: it failed for good (its last attempt). */
export type JobOutcome = 'success' | 'error' | 'failed';

/** Request durations: from a few milliseconds (reads) to the two minutes a paid call may take. */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const RPC_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** A JSON-RPC method name as our code sends it; anything else is counted as `other`. */
const RPC_METHOD = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly requestDuration: Histogram<'operation' | 'method' | 'status'>;
  private readonly capRefusals: Counter<'group'>;
  private readonly paidCalls: Counter<'mode' | 'result'>;
  private readonly jobs: Counter<'task' | 'outcome'>;
  private readonly rpcDuration: Histogram<'network' | 'method' | 'outcome'>;
  private readonly lostPayments: Counter<'leg' | 'network'>;
  private readonly lostUptoCharges: Counter<'network'>;
  private readonly uptoRefusals: Counter<'reason'>;
  private readonly facilitatorRefusals: Counter<'path' | 'status'>;

  /**
   * `uptoExposure`: reads the service's open upto maxima per network class from Postgres (the same
   * figure on every instance), for the gauge prs_upto_exposure_micro_usdc; absent, no such gauge.
   */
  constructor(caps: ConcurrencyCaps | undefined, uptoExposure?: () => Promise<Record<'mainnet' | 'testnet', bigint>>) {
    const registers = [this.registry];
    new Gauge({
      name: 'prs_secp256k1_implementation',
      help: 'The secp256k1 implementation this process signs and recovers with (native, wasm or noble): 1 for the one in use.',
      labelNames: ['implementation'],
      registers,
      collect() {
        const used = processSecp256k1().implementation.name;
        for (const implementation of SECP256K1_IMPLEMENTATIONS)
          this.set({ implementation }, implementation === used ? 1 : 0);
      },
    });
    // The event-loop lag metrics sample at the liveness monitor's pace (server/probes.ts), not every 10 ms.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
    this.requestDuration = new Histogram({
      name: 'prs_http_request_duration_seconds',
      help: 'HTTP requests by operation (operationId of the document, or "none" when no operation matched), method and status, from the first byte read to the response closed.',
      labelNames: ['operation', 'method', 'status'],
      buckets: REQUEST_BUCKETS,
      registers,
    });
    if (caps) {
      const capGauge = (name: string, help: string, value: (metric: CapMetric) => number) =>
        new Gauge({
          name,
          help,
          labelNames: ['group'],
          registers,
          collect() {
            for (const group of CAP_GROUPS) this.set({ group }, value(caps.metric(group)));
          },
        });
      capGauge(
        'prs_requests_in_flight',
        'Requests holding a slot of a concurrency cap group (CAP_RELAY, CAP_PROXY, CAP_WEBHOOKS).',
        (metric) => metric.active,
      );
      capGauge(
        'prs_requests_in_flight_limit',
        'The concurrency cap of each group on this instance.',
        (metric) => metric.limit,
      );
    }
    this.capRefusals = new Counter({
      name: 'prs_cap_refusals_total',
      help: 'Requests refused with 429 because their cap group was full.',
      labelNames: ['group'],
      registers,
    });
    this.paidCalls = new Counter({
      name: 'prs_paid_calls_total',
      help: 'Paid calls by mode (proxy, relay, chat) and result as the request ended: paid, refunded (credits released or the client refunded), failed (a payment was involved and nothing was paid), pending (watched by a job).',
      labelNames: ['mode', 'result'],
      registers,
    });
    this.jobs = new Counter({
      name: 'prs_jobs_total',
      help: 'Jobs run by this process by task and outcome: success, error (an attempt failed and is retried), failed (the last attempt failed).',
      labelNames: ['task', 'outcome'],
      registers,
    });
    this.facilitatorRefusals = new Counter({
      name: 'prs_facilitator_credentials_refused_total',
      help: 'Calls to the facilitator (FACILITATOR_URL) it refused with 401 or 403, by path and status: our credentials (CDP_API_KEY_ID and CDP_API_KEY_SECRET, or FACILITATOR_HEADERS) are missing, wrong, expired or revoked, and no payment settles through it until they are fixed. Alert on any increase; each is also an error log line naming the variables.',
      labelNames: ['path', 'status'],
      registers,
    });
    this.rpcDuration = new Histogram({
      name: 'prs_rpc_request_duration_seconds',
      help: 'JSON-RPC requests to the chains by network, method and outcome (ok or error).',
      labelNames: ['network', 'method', 'outcome'],
      buckets: RPC_BUCKETS,
      registers,
    });
    this.lostPayments = new Counter({
      name: 'prs_payments_lost_to_reorg_total',
      help: 'Settled payments a reorg dropped that can no longer land (expired, nonce used elsewhere, balance gone), by leg (client_settlement, target_payment, refund) and network, as this process found them: alert on any increase. The amount at risk is on the record (finality_watches) and in the error log line.',
      labelNames: ['leg', 'network'],
      registers,
    });
    this.lostUptoCharges = new Counter({
      name: 'prs_upto_charges_lost_total',
      help: "Charges of a client's upto permit on /relay that failed for good after the target was paid (the payer revoked its Permit2 allowance, moved its funds, or the permit expired), by the client's network, as this process found them: the service bore the call's cost. Alert on any increase; the amount lost is on the relay transaction (charged_micro) and in the error log line.",
      labelNames: ['network'],
      registers,
    });
    this.uptoRefusals = new Counter({
      name: 'prs_upto_refusals_total',
      help: "Upto permits on /relay refused before anything moved, by reason: payer_defaulted (the payer once failed to pay an upto charge), wallet_exposure or total_exposure (the payer's or the service's bound on unsettled upto maxima, RELAY_UPTO_EXPOSURE_PER_WALLET_USDC, RELAY_UPTO_EXPOSURE_TOTAL_USDC, was reached). Each was offered exact instead.",
      labelNames: ['reason'],
      registers,
    });
    if (uptoExposure) {
      new Gauge({
        name: 'prs_upto_exposure_micro_usdc',
        help: 'The maxima of upto permits admitted on /relay and not yet settled or ended, in micro-USDC, per network class, for the whole service (read from Postgres at each scrape): what payers who revoke could cost us now. Bounded by RELAY_UPTO_EXPOSURE_TOTAL_USDC.',
        labelNames: ['network_class'],
        registers,
        async collect() {
          // An unreadable database leaves the last figure: the scrape still answers.
          const open = await uptoExposure().catch(() => undefined);
          if (open === undefined) return;
          for (const networkClass of ['mainnet', 'testnet'] as const)
            this.set({ network_class: networkClass }, Number(open[networkClass]));
        },
      });
    }
    // Every known series from the start, at zero: a rate over a counter that appears late misses its first increase.
    for (const group of CAP_GROUPS) this.capRefusals.inc({ group }, 0);
    for (const leg of FINALITY_LEGS) for (const network of NETWORK_NAMES) this.lostPayments.inc({ leg, network }, 0);
    for (const network of NETWORK_NAMES) this.lostUptoCharges.inc({ network }, 0);
    for (const reason of UPTO_REFUSAL_REASONS) this.uptoRefusals.inc({ reason }, 0);
    for (const status of ['401', '403']) this.facilitatorRefusals.inc({ path: '/settle', status }, 0);
    for (const mode of ['proxy', 'relay', 'chat'] as const)
      for (const result of ['paid', 'refunded', 'failed', 'pending'] as const) this.paidCalls.inc({ mode, result }, 0);
  }

  /**
   * The gauges of our float, read from Postgres at each scrape (the same figures on every
   * instance; the float job writes them, payments/tracking/float.ts), and of records stuck past
   * their bound. A source that cannot be read leaves the last figures: the scrape still answers.
   */
  watchOperations(source: OperatingSource): void {
    const registers = [this.registry];
    let last: OperatingFigures | undefined;
    let reading: Promise<OperatingFigures | undefined> | undefined;
    // One read per scrape for every gauge below (each gauge's collect asks; the first read is shared).
    const figures = () => {
      reading ??= source
        .read()
        .then((read) => (last = read))
        .catch(() => last)
        .finally(() => setImmediate(() => (reading = undefined)));
      return reading;
    };
    const perNetwork = (
      name: string,
      help: string,
      value: (network: OperatingFigures['networks'][number]) => number | undefined,
    ) =>
      new Gauge({
        name,
        help,
        labelNames: ['network'],
        registers,
        async collect() {
          const read = await figures();
          if (!read) return;
          for (const network of read.networks) {
            const figure = value(network);
            if (figure !== undefined) this.set({ network: network.network }, figure);
          }
        },
      });
    perNetwork(
      'prs_wallet_float_micro_usdc',
      "Our wallet's stablecoin on each enabled network as the float job last read it (FLOAT_REFRESH_SECONDS), in micro-USDC (the asset counts 1:1 with USDC whatever its decimals). Absent until the network's first reading.",
      (network) => network.floatMicroUsdc,
    );
    perNetwork(
      'prs_wallet_float_floor_micro_usdc',
      'The floor of each enabled network (FLOAT_FLOOR_USDC_<NETWORK>), in micro-USDC: under it, /relay and /proxy refuse paid calls on that network with 503 float_below_floor.',
      (network) => network.floatFloorMicroUsdc,
    );
    perNetwork(
      'prs_wallet_gas_atomic',
      "Our wallet's gas token on each enabled network as the float job last read it, in atomic units: wei (10^-18 ETH or the chain's own token) on EVM networks, lamports (10^-9 SOL) on Solana.",
      (network) => network.gasAtomic,
    );
    perNetwork(
      'prs_wallet_gas_floor_atomic',
      'The gas floor of each enabled network (GAS_FLOOR_<NETWORK>), in the same atomic units: under it, /relay and /proxy refuse paid calls on that network with 503 gas_below_floor.',
      (network) => network.gasFloorAtomic,
    );
    perNetwork(
      'prs_wallet_read_timestamp_seconds',
      "When the float job last read the network's balances (unix seconds): a reading older than a few FLOAT_REFRESH_SECONDS means the job or the chain is failing.",
      (network) => network.readAtSeconds,
    );
    perNetwork(
      'prs_wallet_channel_funds_micro_usdc',
      'Money of ours held in our payment channels on each network (deposited, not yet charged by sellers), in micro-USDC.',
      (network) => network.channelMicroUsdc,
    );
    perNetwork(
      'prs_channel_claim_deadline_seconds',
      "Unix seconds of the nearest claim deadline on each network: the end of a payer's withdrawal delay on a channel we are paid through with charges not yet claimed (absent when none is pending); what is unclaimed then can be withdrawn by the payer.",
      (network) => network.claimDeadlineSeconds,
    );
    perNetwork(
      'prs_refunds_owed_micro_usdc',
      'Relay refunds decided and not yet confirmed (refund_pending) on each network, in micro-USDC: money the float must still pay back.',
      (network) => network.refundsOwedMicroUsdc,
    );
    new Gauge({
      name: 'prs_wallet_below_floor',
      help: 'Whether a network is below a floor as last read (1) or not (0), by network and kind (float: the stablecoin, gas: the gas token): paid calls on a network at 1 are refused with 503.',
      labelNames: ['network', 'kind'],
      registers,
      async collect() {
        const read = await figures();
        if (!read) return;
        for (const network of read.networks) {
          if (network.floatBelow !== undefined)
            this.set({ network: network.network, kind: 'float' }, network.floatBelow ? 1 : 0);
          if (network.gasBelow !== undefined)
            this.set({ network: network.network, kind: 'gas' }, network.gasBelow ? 1 : 0);
        }
      },
    });
    new Gauge({
      name: 'prs_states_stuck',
      help: "Records still open past their bound, by table: relay_transactions and refunds an hour after their last move, proxy_payments an hour past PROXY_PAYMENT_WINDOW_SECONDS, finality_watches past their network's watch bound. Alert on any above 0: a job is not moving them.",
      labelNames: ['table'],
      registers,
      async collect() {
        const read = await figures();
        if (!read) return;
        for (const [table, count] of Object.entries(read.stuck)) this.set({ table }, count);
      },
    });
  }

  /**
   * prs_ready_check: this instance's readiness checks (those of GET /health/ready: database, worker,
   * each network's RPC), run at each scrape. A check's name is from a closed set (`rpc:<network>`).
   */
  watchReadiness(ready: () => Promise<{ checks: Record<string, string> }>): void {
    new Gauge({
      name: 'prs_ready_check',
      help: "This instance's readiness checks as GET /health/ready runs them, at each scrape: 1 when the check passed, 0 when it failed (database, worker, rpc:<network>).",
      labelNames: ['check'],
      registers: [this.registry],
      async collect() {
        const report = await ready().catch(() => undefined);
        if (!report) return;
        for (const [check, result] of Object.entries(report.checks)) this.set({ check }, result === 'ok' ? 1 : 0);
      },
    });
  }

  observeRequest(operation: string | undefined, method: string, status: number, seconds: number): void {
    this.requestDuration.observe({ operation: operation ?? 'none', method, status: String(status) }, seconds);
  }

  capRefused(group: CapGroup): void {
    this.capRefusals.inc({ group });
  }

  paidCall(mode: PaidCallMode, result: PaidCallResult): void {
    this.paidCalls.inc({ mode, result });
  }

  /** A settled payment that a reorg dropped and that can no longer land. */
  paymentLost(leg: FinalityLeg, network: string): void {
    this.lostPayments.inc({ leg, network: (NETWORK_NAMES as readonly string[]).includes(network) ? network : 'other' });
  }

  /** A client's upto permit that could not be settled after the target was paid. */
  uptoChargeLost(network: string): void {
    this.lostUptoCharges.inc({ network: (NETWORK_NAMES as readonly string[]).includes(network) ? network : 'other' });
  }

  /** An upto permit refused before anything moved (its payer defaulted once, or an exposure bound was reached). */
  uptoRefused(reason: UptoRefusalReason): void {
    this.uptoRefusals.inc({ reason });
  }

  /** A call the facilitator refused with 401 or 403: our credentials for it. */
  facilitatorRefusedCredentials(path: '/settle', status: number): void {
    this.facilitatorRefusals.inc({ path, status: String(status) });
  }

  job(task: string, outcome: JobOutcome): void {
    this.jobs.inc({ task, outcome });
  }

  /** What the chains report each JSON-RPC request through (payments/networks). */
  readonly rpc: RpcObserver = (network, method, seconds, ok) => {
    this.rpcDuration.observe(
      { network, method: RPC_METHOD.test(method) ? method : 'other', outcome: ok ? 'ok' : 'error' },
      seconds,
    );
  };

  /** The text exposition format. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
