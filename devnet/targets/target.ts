// One x402-protected target: an express app on 127.0.0.1 serving every route of routes.ts, each
// free or paid (price, payTo and network per route), recording every request it receives and how
// many are in flight at once. A target speaks one x402 version: 1 (x402-express 1.2.0 or our own
// layer, X-PAYMENT) or 2 (@x402/express 2.27, PAYMENT-SIGNATURE).
import express, { type Express, type Request, type RequestHandler, type Response } from 'express';
import { listenLocally } from '../http.js';
import type { NetworkName } from '../networks.js';
import {
  createOwnLayer,
  paymentRequired,
  requirementsFor,
  x402ExpressKnows,
  x402ExpressLayer,
  versionOfLayer,
  type PaidRoute,
  type PaymentLayerName,
  type X402Version,
} from './payment.js';
import {
  askAgainHeader,
  BatchSettlementReceivers,
  type BatchSettlementReceiver,
  V2_PAYMENT_HEADER,
  V2_PAYMENT_REQUIRED_HEADER,
  V2_PAYMENT_RESPONSE_HEADER,
  x402ExpressV2Knows,
  x402ExpressV2Layer,
  type V2Extensions,
  type V2OfferKind,
} from './payment-v2.js';
import {
  DEFAULT_HOLD_TIMEOUT_MS,
  DEFAULT_SLOW_DELAY_MS,
  HoldGate,
  ROUTE_NAMES,
  ROUTE_PATHS,
  replyFor,
  requestBodyText,
  type RouteContext,
  type RouteName,
} from './routes.js';

export const MAX_REQUEST_BODY = '1mb';

export interface RouteSettings {
  /** Price in micro-USDC; null makes the route free. */
  priceMicroUsdc: bigint | null;
  payTo: string;
  network: NetworkName;
}

export interface TargetConfig {
  name: string;
  network: NetworkName;
  payTo: string;
  /** Default 1. Version 2 targets sit behind @x402/express 2.27 and its facilitator (facilitatorV2Url). */
  x402Version?: X402Version;
  /** Default: x402-express where it knows the route's network, our own layer elsewhere; @x402/express for version 2. */
  paymentLayer?: PaymentLayerName;
  /** Version 2 only: what the paid routes ask (default exact, by the network's own transfer method). */
  v2Offer?: V2OfferKind;
  /** Solana: the mint the paid routes ask for instead of the cluster's USDC. */
  solanaMint?: string;
  routes: Record<RouteName, RouteSettings>;
  slowDelayMs?: number;
  errorStatus?: number;
  holdTimeoutMs?: number;
  /** Version 2 only: the x402 extensions the paid routes declare. */
  v2Extensions?: V2Extensions;
  /** Version 2 only: settle through the pending facilitator (answers settlement_pending, lands once released). */
  settlementPending?: boolean;
}

export interface RecordedRequest {
  route: RouteName | null;
  method: string;
  path: string;
  query: Record<string, unknown>;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  contentType: string | null;
  /** The payment header of the target's version (X-PAYMENT for v1, PAYMENT-SIGNATURE for v2), when one came. */
  payment: string | null;
  receivedAtMs: number;
  /** Filled when the answer has been sent. */
  status: number | null;
  /** The settlement header the target sent (X-PAYMENT-RESPONSE for v1, PAYMENT-RESPONSE for v2). */
  paymentResponse: string | null;
}

export interface Target {
  name: string;
  network: NetworkName;
  /** The x402 version the target speaks on its paid routes. */
  x402Version: X402Version;
  payTo: string;
  url: string;
  routes: Record<RouteName, RouteSettings & { url: string; paymentLayer: PaymentLayerName | null }>;
  requests: RecordedRequest[];
  readonly inFlight: number;
  readonly maxInFlight: number;
  hold: HoldGate;
  /** Version 2 targets declaring payment-identifier: the payment ids their paid routes were sent, in order. */
  paymentIds: string[];
  /**
   * Version 2 targets offering batch-settlement: their receivers (one per network and payTo, made
   * as routes are mounted), each with its channel storage and the channel manager that claims and
   * settles; empty for other targets.
   */
  batchSettlement: BatchSettlementReceiver[];
  /** Forgets recorded requests and the concurrency maxima. */
  reset(): void;
  close(): Promise<void>;
}

export interface TargetFacilitators {
  /** The v1 facilitator (x402-express 1.2.0 and our own layer). */
  url: string;
  solanaFeePayer: string;
  /** The v2 facilitator (@x402/express 2.27); needed by version 2 targets only. */
  v2Url?: string;
  /** The pending facilitator (settlementPending targets). */
  v2PendingUrl?: string;
}

export async function startTarget(config: TargetConfig, facilitators: TargetFacilitators): Promise<Target> {
  const { url: facilitatorUrl, solanaFeePayer } = facilitators;
  const x402Version = config.x402Version ?? (config.paymentLayer ? versionOfLayer(config.paymentLayer) : 1);
  if (config.paymentLayer && versionOfLayer(config.paymentLayer) !== x402Version)
    throw new Error(`target ${config.name}: ${config.paymentLayer} does not speak x402 version ${x402Version}`);
  const facilitatorV2Url = config.settlementPending ? facilitators.v2PendingUrl : facilitators.v2Url;
  if (x402Version === 2 && facilitatorV2Url === undefined)
    throw new Error(`target ${config.name}: x402 version 2 needs the v2 facilitator`);
  const stopping = new AbortController();
  const hold = new HoldGate(config.holdTimeoutMs ?? DEFAULT_HOLD_TIMEOUT_MS);
  const context: RouteContext = {
    targetName: config.name,
    network: config.network,
    slowDelayMs: config.slowDelayMs ?? DEFAULT_SLOW_DELAY_MS,
    errorStatus: config.errorStatus ?? 500,
    hold,
    signal: stopping.signal,
  };
  const recorder = new RequestRecorder(x402Version);

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(express.raw({ type: () => true, limit: MAX_REQUEST_BODY }));
  app.use(recorder.middleware);

  const serveOwnPaidRoute = createOwnLayer(facilitatorUrl, solanaFeePayer);
  const layersReady: Promise<void>[] = [];
  const paymentIds: string[] = [];
  const receivers = new BatchSettlementReceivers(facilitatorV2Url ?? '');
  const routes = {} as Target['routes'];
  for (const route of ROUTE_NAMES) {
    routes[route] = mountRoute(app, route, {
      config,
      x402Version,
      context,
      facilitatorUrl,
      facilitatorV2Url: facilitatorV2Url ?? '',
      solanaFeePayer,
      serveOwnPaidRoute,
      layersReady,
      paymentIds,
      receivers,
    });
  }
  await Promise.all(layersReady);

  const server = await listenLocally(app);
  for (const route of ROUTE_NAMES) routes[route].url = `${server.url}${ROUTE_PATHS[route]}`;

  return {
    name: config.name,
    network: config.network,
    x402Version,
    payTo: config.payTo,
    url: server.url,
    routes,
    requests: recorder.requests,
    get inFlight() {
      return recorder.inFlight;
    },
    get maxInFlight() {
      return recorder.maxInFlight;
    },
    hold,
    paymentIds,
    batchSettlement: receivers.all,
    reset() {
      recorder.reset();
      hold.resetCounters();
    },
    async close() {
      stopping.abort();
      hold.abandonAll();
      await server.close();
    },
  };
}

/** Records every request the target receives, and how many are in flight at once. */
class RequestRecorder {
  readonly requests: RecordedRequest[] = [];
  inFlight = 0;
  maxInFlight = 0;
  private readonly routeByPath = new Map(ROUTE_NAMES.map((route) => [ROUTE_PATHS[route], route] as const));
  private readonly paymentHeader: string;
  private readonly paymentResponseHeader: string;

  constructor(x402Version: X402Version) {
    this.paymentHeader = x402Version === 2 ? V2_PAYMENT_HEADER : 'X-PAYMENT';
    this.paymentResponseHeader = x402Version === 2 ? V2_PAYMENT_RESPONSE_HEADER : 'X-PAYMENT-RESPONSE';
  }

  readonly middleware: RequestHandler = (request, response, next) => {
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    const record: RecordedRequest = {
      route: this.routeByPath.get(request.path) ?? null,
      method: request.method,
      path: request.path,
      query: request.query,
      headers: request.headers,
      body: requestBodyText(request),
      contentType: request.headers['content-type'] ?? null,
      payment: request.header(this.paymentHeader) ?? null,
      receivedAtMs: Date.now(),
      status: null,
      paymentResponse: null,
    };
    this.requests.push(record);
    response.once('close', () => {
      this.inFlight -= 1;
      record.status = response.statusCode;
      const paymentResponse = response.getHeader(this.paymentResponseHeader);
      record.paymentResponse = typeof paymentResponse === 'string' ? paymentResponse : null;
    });
    next();
  };

  /** Forgets recorded requests and the concurrency maximum. */
  reset(): void {
    this.requests.length = 0;
    this.maxInFlight = this.inFlight;
  }
}

interface MountContext {
  config: TargetConfig;
  x402Version: X402Version;
  context: RouteContext;
  facilitatorUrl: string;
  facilitatorV2Url: string;
  solanaFeePayer: string;
  serveOwnPaidRoute: ReturnType<typeof createOwnLayer>;
  /** Collects the payment layers' start-up work, awaited before the target listens. */
  layersReady: Promise<void>[];
  /** Collects the payment ids the paid routes are sent (routes declaring payment-identifier). */
  paymentIds: string[];
  /** The target's batch-settlement receivers (routes offering batch-settlement). */
  receivers: BatchSettlementReceivers;
}

/** Serves one route, free or behind its payment layer; returns its settings (url filled in later). */
function mountRoute(
  app: Express,
  route: RouteName,
  {
    config,
    x402Version,
    context,
    facilitatorUrl,
    facilitatorV2Url,
    solanaFeePayer,
    serveOwnPaidRoute,
    layersReady,
    paymentIds,
    receivers,
  }: MountContext,
): Target['routes'][RouteName] {
  const settings = config.routes[route];
  const path = ROUTE_PATHS[route];
  const paid: PaidRoute | null =
    settings.priceMicroUsdc === null
      ? null
      : {
          path,
          network: settings.network,
          payTo: settings.payTo,
          priceMicroUsdc: settings.priceMicroUsdc,
          description: `${route} route of an x402 test target`,
          ...(config.solanaMint === undefined ? {} : { solanaMint: config.solanaMint }),
        };
  const paymentLayer: PaymentLayerName | null = !paid
    ? null
    : x402Version === 2
      ? '@x402/express'
      : (config.paymentLayer ?? (x402ExpressKnows(settings.network) ? 'x402-express' : 'own'));
  if (paymentLayer === 'x402-express' && !x402ExpressKnows(settings.network)) {
    throw new Error(`x402-express 1.2.0 does not know ${settings.network} (target ${config.name}, route ${route})`);
  }
  if (paymentLayer === '@x402/express' && !x402ExpressV2Knows(settings.network)) {
    throw new Error(`the v2 targets do not serve ${settings.network} (target ${config.name}, route ${route})`);
  }

  const produce = async (request: Request, response: Response) => {
    // A target that never settles asks again for exactly what it was offered.
    if (route === 'neverSettles' && paid && x402Version === 2) {
      const header = askAgainHeader(request, 'payment_not_accepted');
      if (header !== undefined) response.setHeader(V2_PAYMENT_REQUIRED_HEADER, header);
      return { status: 402, body: {} };
    }
    if (route === 'neverSettles' && paid) {
      return {
        status: 402,
        body: paymentRequired('payment_not_accepted', [requirementsFor(paid, request, solanaFeePayer)]),
      };
    }
    return replyFor(route, request, context);
  };

  if (paid && paymentLayer === 'own') {
    app.all(path, (request, response, next) => {
      serveOwnPaidRoute(paid, request, response, () => produce(request, response)).catch(next);
    });
  } else {
    const handlers: RequestHandler[] = [];
    if (paid && paymentLayer === '@x402/express') {
      const layer = x402ExpressV2Layer(
        paid,
        facilitatorV2Url,
        config.v2Offer,
        config.v2Extensions,
        paymentIds,
        receivers,
      );
      layersReady.push(layer.ready);
      handlers.push(...layer.handlers);
    } else if (paid) {
      handlers.push(x402ExpressLayer(paid, facilitatorUrl));
    }
    app.all(path, ...handlers, (request, response, next) => {
      produce(request, response)
        .then((reply) => response.status(reply.status).json(reply.body))
        .catch(next);
    });
  }
  return { ...settings, url: '', paymentLayer };
}
